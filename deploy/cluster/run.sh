#!/usr/bin/env bash
# A three-node nsqmp cluster on this machine: two lookupds and three brokers on 127.0.0.1,
# each with its own ports, data directory and log. One command; Ctrl-C (or SIGTERM) stops
# everything it started, by PID. See deploy/cluster/README.md.
#
#   deploy/cluster/run.sh                      # ports 4150..4351, data in ./nsqmp-cluster
#   BASE_PORT=24150 CLUSTER_DIR=/tmp/c deploy/cluster/run.sh
#
# Environment: NSQMP (the nsqmp command; default: the repository's .venv/bin/nsqmp, else
# the one on PATH), BASE_PORT (default 4150), CLUSTER_DIR (default ./nsqmp-cluster),
# ACCEPTORS and ROUTERS per broker (default 1 each: five processes share this machine).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
nsqmp=${NSQMP:-}
if [[ -z "$nsqmp" ]]; then
    if [[ -x "$repo/.venv/bin/nsqmp" ]]; then nsqmp="$repo/.venv/bin/nsqmp"; else nsqmp=$(command -v nsqmp || true); fi
fi
if [[ -z "$nsqmp" ]]; then
    echo "run.sh: no nsqmp command: run 'make run' once in the repository, or set NSQMP=/path/to/nsqmp" >&2
    exit 2
fi
base=${BASE_PORT:-4150}
dir=${CLUSTER_DIR:-$PWD/nsqmp-cluster}
acceptors=${ACCEPTORS:-1}
routers=${ROUTERS:-1}
mkdir -p "$dir"

pids=()
stopping=0
stop_all() {
    [[ $stopping == 1 ]] && return
    stopping=1
    echo "stopping ${#pids[@]} processes: ${pids[*]}"
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    echo "stopped"
}
trap 'stop_all; exit 0' INT TERM
trap stop_all EXIT

# wait_for LOGFILE PID TEXT: until the process wrote TEXT; fail if it exits first
wait_for() {
    local log=$1 pid=$2 text=$3 tries=0
    until grep -q "$text" "$log" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run.sh: process $pid exited; its log ($log):" >&2
            tail -n 20 "$log" >&2
            exit 1
        fi
        tries=$((tries + 1))
        if (( tries > 600 )); then
            echo "run.sh: $log never said '$text' (60 s)" >&2
            exit 1
        fi
        sleep 0.1
    done
}

lookupd_tcp=()
lookupd_http=()
for k in 1 2; do
    tcp=$((base + 10 + 100 * (k - 1)))
    http=$((tcp + 1))
    log="$dir/lookupd$k.log"
    "$nsqmp" lookupd --tcp-address="127.0.0.1:$tcp" --http-address="127.0.0.1:$http" \
        --broadcast-address=127.0.0.1 >"$log" 2>&1 &
    pids+=($!)
    wait_for "$log" $! "HTTP: listening"
    lookupd_tcp+=("127.0.0.1:$tcp")
    lookupd_http+=("127.0.0.1:$http")
done

registrations=()
for addr in "${lookupd_tcp[@]}"; do registrations+=(--lookupd-tcp-address "$addr"); done
broker_lines=()
for n in 1 2 3; do
    tcp=$((base + 100 * (n - 1)))
    http=$((tcp + 1))
    log="$dir/broker$n.log"
    # --node-id keeps message ids unique across the cluster
    "$nsqmp" serve --tcp-address "127.0.0.1:$tcp" --http-address "127.0.0.1:$http" \
        --data-path "$dir/broker$n" --broadcast-address 127.0.0.1 --node-id $((n * 100)) \
        --acceptors "$acceptors" --routers "$routers" "${registrations[@]}" >"$log" 2>&1 &
    pids+=($!)
    wait_for "$log" $! "nsqmp ready"
    broker_lines+=("  broker $n    tcp 127.0.0.1:$tcp   http http://127.0.0.1:$http   data $dir/broker$n")
done

echo "nsqmp cluster ready (Ctrl-C stops it)"
for k in 1 2; do
    echo "  lookupd $k   tcp ${lookupd_tcp[k-1]}   http http://${lookupd_http[k-1]}"
done
printf '%s\n' "${broker_lines[@]}"
echo "  logs in $dir"
echo "pids: ${pids[*]}"
echo "try:  curl -d hello 'http://127.0.0.1:$((base + 1))/pub?topic=test'"
echo "      curl 'http://${lookupd_http[0]}/lookup?topic=test'"

# until a signal (the trap stops everything) or every process has ended on its own
wait
