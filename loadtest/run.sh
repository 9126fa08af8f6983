#!/usr/bin/env bash
# Run the locust load test headless against a running broker for a fixed time and write
# locust's CSV and HTML reports. Extra arguments go to locust as they are (they come last,
# so they win over the defaults here). See loadtest/README.md.
#
#   loadtest/run.sh                                        # mixed, 10 users, 60 s, 127.0.0.1:4150
#   USERS=40 RUN_TIME=5m loadtest/run.sh --scenario publish --pub-rate 0 --batch-size 100
#   OUT=/tmp/lt/run1 loadtest/run.sh --host tcp://10.0.0.5:4150   # or --nsqd-tcp-address 10.0.0.5:4150
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

USERS="${USERS:-10}"
SPAWN_RATE="${SPAWN_RATE:-$USERS}"
RUN_TIME="${RUN_TIME:-60s}"
NSQD_TCP_ADDRESS="${NSQD_TCP_ADDRESS:-127.0.0.1:4150}"
OUT="${OUT:-$here/reports/$(date +%Y%m%d-%H%M%S)}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi

mkdir -p "$(dirname "$OUT")"
echo "locust: $USERS users for $RUN_TIME against $NSQD_TCP_ADDRESS; reports: ${OUT}_stats.csv, ${OUT}.html" >&2
# nsqmp.client from this checkout even if the package is not installed in $PYTHON
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m locust -f "$here/locustfile.py" --headless \
    -u "$USERS" -r "$SPAWN_RATE" --run-time "$RUN_TIME" \
    --csv "$OUT" --html "$OUT.html" \
    --host "tcp://$NSQD_TCP_ADDRESS" \
    "$@"
