"""`nsqmp bench answers` runs end to end on real brokers (the figures are not asserted)."""
from __future__ import annotations

import subprocess
import sys

import orjson

from nsqmp.bench import answers


def test_each_kind_of_answer_takes_every_message_and_reports_each_role():
    out = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "answers", "--messages", "3000", "--reps", "1",
                          "--consumer-procs", "1", "--json"], check=True, capture_output=True, timeout=300).stdout
    result = orjson.loads(out)
    assert (result["messages"], result["reps"]) == (3000, 1)
    runs = result["runs"]
    assert set(runs) == {"fin", "touch", "req"}
    for kind, (run,) in runs.items():
        assert set(run) == {"timer", "routers", "acceptors", "broker", "seconds", "requeue_count"}
        assert all(run[role] >= 0 for role in ("timer", "routers", "acceptors")), (kind, run)
        # every message was finished (run_one checks finish_count); a REQ 0 requeued each once
        assert run["requeue_count"] == (3000 if kind == "req" else 0), (kind, run)
    assert set(result["per_million_touch_or_req"]) == {"touch", "req"}


def test_the_answers_each_kind_sends():
    mid = b"0123456789abcdef"
    assert answers._answer("fin", 1, mid) == b"FIN " + mid + b"\n"
    assert answers._answer("touch", 1, mid) == b"TOUCH " + mid + b"\nFIN " + mid + b"\n"
    assert answers._answer("req", 1, mid) == b"REQ " + mid + b" 0\n"
    assert answers._answer("req", 2, mid) == b"FIN " + mid + b"\n"


def test_bad_arguments():
    bad = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "answers", "--messages", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr
