#!/bin/sh
# Connection set-up between two processes, each with its own simulated NIC over UDP:
# the CM (the client's REQ to ESTABLISHED on both sides; examples/cm_connect.rs) and
# a TCP connect between the same two processes, alternated ROUNDS times per run,
# RUNS runs; prints each run's markdown table (medians and 90th percentiles, us).
# The same with rdma-core's librdmacm under `ferroverbs run`: cmtime's per-step
# figures for CONNS connections at once (rdmacm-utils; skipped without it).
#
#   benches/cm_connect.sh [PROFILE_DIR]   (default target/release; build first:
#   cargo build --release --example cm_connect --bin ferroverbs &&
#   cargo build --release -p ferroverbs-uapi)
set -eu
T=${1:-target/release}
RUNS=${RUNS:-3}
ROUNDS=${ROUNDS:-200}
CONNS=${CONNS:-10}
PORT=${PORT:-19800}
E=$T/examples/cm_connect
for r in $(seq "$RUNS"); do
    PORT=$((PORT + 2))
    timeout 600 "$E" --server --ip 127.0.78.1 --port "$PORT" --rounds "$ROUNDS" >/dev/null &
    spid=$!
    echo "run $r (load average $(cut -d' ' -f1 /proc/loadavg)):"
    echo
    timeout 600 "$E" --ip 127.0.78.2 --connect 127.0.78.1 --port "$PORT" --rounds "$ROUNDS"
    wait "$spid" || true
    echo
done
if command -v cmtime >/dev/null; then
    F=$T/ferroverbs
    LIB=$(ls "$T"/libferroverbs_uapi.so "$T"/deps/libferroverbs_uapi.so 2>/dev/null | head -1)
    PORT=$((PORT + 2))
    echo "cmtime -c $CONNS under ferroverbs run (librdmacm on the rdma_cm device):"
    echo
    echo '```'
    FERROVERBS_UAPI_LIB=$LIB timeout 30 "$F" run --device sim:127.0.78.3 -- cmtime -p "$PORT" >/dev/null 2>&1 &
    spid=$!
    sleep 2
    FERROVERBS_UAPI_LIB=$LIB timeout 60 "$F" run --device sim:127.0.78.4 -- \
        cmtime -c "$CONNS" -p "$PORT" -s 127.0.78.3 | sed -n '/^step/,$p'
    echo '```'
    # cmtime's server serves until killed (rdma-core 44).
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
fi
