#!/usr/bin/env bash
# Runs the measurements of docs/performance.md and prints its tables in markdown.
#
# Usage: benches/report.sh [runs]   (default 5 runs of each wall-clock figure)
#
# * the fast-path instruction counts (benches/icount.sh, callgrind: deterministic);
# * instructions per SEND of the rate loop (callgrind of rc_rate --msgs 50000 minus
#   --msgs 64, over the 54,976 SENDs between them);
# * rc_rate --msgs 5000000, `runs` times; when BASE_RC_RATE names another rc_rate
#   binary (e.g. a build of an older commit), its runs alternate with these and its
#   median is printed as the baseline;
# * rc_pingpong --iters 20000 --tcp, `runs` times: the simulator's p50 round trip
#   against the TCP loopback ping-pong measured in the same process;
# * `ferroverbs perf` (perftest's tests) with the baseline each measures in the same
#   run, in one process and across two processes over UDP;
# * benches/uapi_latency.sh --release (RUNS=`runs`): ibv_rc_pingpong and ib_send_lat
#   round trips on rdma-core's libmlx5 under `ferroverbs run` against the drop-in,
#   alternated, with the ratios, and an idle program's CPU on each;
# * benches/scale.sh (SCALE_RUNS runs, default 3): write-bw and send-bw with 1 to
#   16384 QPs against one QP, memory per idle QP and per CQ, creation and
#   destruction times;
# * benches/cm_connect.sh: connection set-up by the CM (REQ to ESTABLISHED on both
#   sides) against a TCP connect between the same two processes, and cmtime's steps.
#
# Wall-clock figures need a quiet machine (nothing else running); the script prints
# the load average next to them.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
T=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet --example rc_rate --example rc_pingpong
RATE=$T/release/examples/rc_rate
PING=$T/release/examples/rc_pingpong
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
load() { cut -d' ' -f1 /proc/loadavg; }

echo "Figures of commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC')."
echo "Machine: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), Linux $(uname -r)."
echo

echo "## The fast path on MemBus (benches/icount.sh 20000)"
echo
echo "| case | instructions per operation |"
echo "|---|---|"
benches/icount.sh 20000 | awk 'NR > 1 { extra = ""; if (NF > 4) { extra = " " $5 " " $6 " " $7 }; printf "| `%s` | %s%s |\n", $1, $4, extra }'
echo

echo "## Instructions per SEND, rate loop"
echo
valgrind --tool=callgrind --callgrind-out-file="$OUT/big.out" "$RATE" --msgs 50000 >/dev/null 2>&1
valgrind --tool=callgrind --callgrind-out-file="$OUT/small.out" "$RATE" --msgs 64 >/dev/null 2>&1
big=$(awk '/^summary:/ {print $2}' "$OUT/big.out")
small=$(awk '/^summary:/ {print $2}' "$OUT/small.out")
awk -v a="$big" -v b="$small" 'BEGIN { printf "%.1f instructions per SEND\n\n", (a - b) / 54976 }'

echo "## Message rate (rc_rate --msgs 5000000, $RUNS runs, load average at start $(load))"
echo
rate() { "$1" --msgs 5000000 | sed -n 's/.* = \([0-9.]*\) M SENDs\/s.*/\1/p'; }
: >"$OUT/rate"
: >"$OUT/base"
for _ in $(seq "$RUNS"); do
    rate "$RATE" >>"$OUT/rate"
    if [ -n "${BASE_RC_RATE:-}" ]; then rate "$BASE_RC_RATE" >>"$OUT/base"; fi
done
echo "| figure | runs (M SENDs/s) | median |"
echo "|---|---|---|"
echo "| this commit | $(paste -sd' ' "$OUT/rate") | $(median <"$OUT/rate") |"
if [ -s "$OUT/base" ]; then
    echo "| baseline \`$BASE_RC_RATE\`, alternated | $(paste -sd' ' "$OUT/base") | $(median <"$OUT/base") |"
fi
echo

echo "## Ping-pong against TCP loopback (rc_pingpong --iters 20000 --tcp, $RUNS runs, load average at start $(load))"
echo
echo "| run | simulator p50 round trip (µs) | TCP p50 round trip (µs) | ratio |"
echo "|---|---|---|---|"
: >"$OUT/ratio"
for i in $(seq "$RUNS"); do
    "$PING" --iters 20000 --tcp >"$OUT/ping"
    sim=$(sed -n 's/^round trip: .* p50 \([0-9.]*\) us.*/\1/p' "$OUT/ping")
    tcp=$(sed -n 's/^tcp loopback .* p50 \([0-9.]*\) us.*/\1/p' "$OUT/ping")
    ratio=$(sed -n 's/.*ratio tcp\/rc = \([0-9.]*\)x.*/\1/p' "$OUT/ping")
    echo "$ratio" >>"$OUT/ratio"
    echo "| $i | $sim | $tcp | ${ratio}x |"
done
echo
echo "Median ratio: $(median <"$OUT/ratio")x (target: at least 20x)."
echo

# `ferroverbs perf`: perftest's tests in one process, each beside the baseline it
# measures in the same run (the line `<figure>: X vs baseline Y: verdict`).
cargo build --release --quiet --bin ferroverbs
F=$T/release/ferroverbs
echo "## \`ferroverbs perf\` with same-run baselines (load average at start $(load))"
echo
echo "| command | figure | test | baseline | verdict |"
echo "|---|---|---|---|---|"
perf_row() {
    local args="$1"
    # shellcheck disable=SC2086
    timeout 600 "$F" perf $args --baseline 2>&1 | sed -n 's/^ *\([^:]*\): \([0-9.]* [^ ]*\) vs baseline \([0-9.]* [^ ]*\): \(.*\)$/\1|\2|\3|\4/p' |
        while IFS='|' read -r what test base verdict; do
            echo "| \`perf $args\` | $what | $test | $base | $verdict |"
        done
}
perf_row "send-lat -n 20000"
perf_row "send-lat -s 64 -n 20000"
perf_row "write-lat -s 64 -n 20000"
perf_row "read-lat -n 20000"
perf_row "atomic-lat -n 20000"
perf_row "send-bw -s 64 -n 200000"
perf_row "write-bw -s 64 -n 200000"
perf_row "write-bw -s 64 -n 200000 -l 16"
perf_row "send-bw -n 2000"
perf_row "write-bw -n 5000"
echo

# Across processes: one simulated NIC each (127.0.0.1 server, 127.0.0.2 client), RC over
# UDP; the baselines (TCP ping-pong, raw UDP) run between the same two processes.
echo "## Across processes, RoCEv2 over UDP (load average at start $(load))"
echo
echo "| command | figure | test | baseline | verdict |"
echo "|---|---|---|---|---|"
pair_row() {
    local args="$1"
    # shellcheck disable=SC2086
    timeout 600 "$F" perf $args --baseline --server >"$OUT/server" 2>&1 &
    local spid=$!
    sleep 1
    # shellcheck disable=SC2086
    timeout 600 "$F" perf $args --baseline --client 127.0.0.1 2>&1 |
        sed -n 's/^ *\([^:]*\): \([0-9.]* [^ ]*\) vs baseline \([0-9.]* [^ ]*\): \(.*\)$/\1|\2|\3|\4/p' |
        while IFS='|' read -r what test base verdict; do
            echo "| \`perf $args\` (two processes) | $what | $test | $base | $verdict |"
        done
    wait "$spid" || true
}
pair_row "send-lat -s 64 -n 20000"
pair_row "write-bw -n 5000"
echo
echo "## Connection set-up: the CM against a TCP connect (benches/cm_connect.sh, load average at start $(load))"
echo
cargo build --release --quiet --example cm_connect --bin ferroverbs
cargo build --release --quiet -p ferroverbs-uapi
RUNS=$RUNS benches/cm_connect.sh "$T/release"

echo "## rdma-core's libmlx5 on the uAPI layer against the drop-in (benches/uapi_latency.sh --release, $RUNS alternated runs)"
echo
echo '```'
RUNS=$RUNS benches/uapi_latency.sh --release
echo '```'
echo
benches/scale.sh "${SCALE_RUNS:-3}"
