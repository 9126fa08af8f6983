"""`nsqmp bench ring` runs end to end on both ring implementations (figures not asserted)."""
from __future__ import annotations

import json

from nsqmp.bench import ring


def test_ringbench_smoke(capsys):
    for impl in ("native", "python"):
        for batch in ("1", "16"):
            assert (
                ring.main(
                    [
                        "--records",
                        "20000",
                        "--size",
                        "100",
                        "--batch",
                        batch,
                        "--impl",
                        impl,
                        "--capacity",
                        "65536",
                        "--timeout",
                        "60",
                    ]
                )
                == 0
            )
            out = json.loads(capsys.readouterr().out)
            assert out["impl"] == impl and out["records"] == 20000
            assert out["records_per_s"] > 0
            assert out["producer"]["doorbell_writes"] <= 20000
