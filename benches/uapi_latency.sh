#!/bin/sh
# Round-trip latency of `ibv_rc_pingpong` and `ib_send_lat` between two processes on
# the userspace RDMA interface (rdma-core's libibverbs + libmlx5 under `ferroverbs
# run`) and on the drop-in libibverbs.so.1, alternated RUNS times in one run, and the
# CPU an idle program costs on each (an `ibv_rc_pingpong` server waiting 10 s for its
# client: device open, PD, MR, CQ, QP created).
#
#   benches/uapi_latency.sh [PROFILE_DIR]     (default target/debug; build first:
#   cargo build -p ferroverbs-workspace -p ferroverbs-uapi -p ferroverbs-ibverbs)
#
# Prints one line per run and the medians. Needs ibverbs-utils and perftest.
set -eu
T=${1:-target/debug}
RUNS=${RUNS:-3}
ITERS=${ITERS:-2000}
F=$T/ferroverbs
LIB=$(ls "$T"/libferroverbs_uapi.so "$T"/deps/libferroverbs_uapi.so 2>/dev/null | head -1)
DROP=$(mktemp -d)
ln -s "$(realpath "$T"/libibverbs.so)" "$DROP"/libibverbs.so.1
trap 'rm -rf "$DROP"' EXIT
PORT=${PORT:-19750}

# pair LAYER TOOL ARGS...: prints the client's output.
pair() {
    layer=$1; tool=$2; shift 2
    PORT=$((PORT + 1))
    if [ "$layer" = uapi ]; then
        s="env FERROVERBS_UAPI_LIB=$LIB $F run --device sim:127.0.77.1 --"
        c="env FERROVERBS_UAPI_LIB=$LIB $F run --device sim:127.0.77.2 --"
    else
        s="env LD_LIBRARY_PATH=$DROP FERROVERBS_DEVICE=sim:127.0.77.1"
        c="env LD_LIBRARY_PATH=$DROP FERROVERBS_DEVICE=sim:127.0.77.2"
    fi
    timeout 300 $s "$tool" -p $PORT "$@" >/dev/null 2>&1 &
    sleep 1.5
    timeout 300 $c "$tool" -p $PORT "$@" 127.0.77.1 2>&1 || true
    wait || true
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for r in $(seq "$RUNS"); do
    for layer in dropin uapi; do
        pp=$(pair $layer ibv_rc_pingpong -g 0 -n "$ITERS" | awk '/iters in/ {print $(NF-1)}')
        sl=$(pair $layer ib_send_lat -n "$ITERS" | awk '$1 == "2" {print $6}' | head -1)
        echo "run $r $layer ibv_rc_pingpong_us_per_iter $pp ib_send_lat_avg_us $sl"
        echo "$pp" >> "$DROP/pp_$layer"; echo "$sl" >> "$DROP/sl_$layer"
    done
done
for layer in dropin uapi; do
    echo "median $layer ibv_rc_pingpong_us_per_iter $(median < "$DROP/pp_$layer") ib_send_lat_avg_us $(median < "$DROP/sl_$layer")"
done

# Idle CPU: CPU seconds (utime + stime, all threads) over 10 s of a server waiting.
hz=$(getconf CLK_TCK)
for layer in dropin uapi; do
    PORT=$((PORT + 1))
    if [ "$layer" = uapi ]; then
        env FERROVERBS_UAPI_LIB="$LIB" $F run --device sim:127.0.77.3 -- ibv_rc_pingpong -g 0 -p $PORT >/dev/null 2>&1 &
    else
        env LD_LIBRARY_PATH="$DROP" FERROVERBS_DEVICE=sim:127.0.77.3 ibv_rc_pingpong -g 0 -p $PORT >/dev/null 2>&1 &
    fi
    sleep 3
    pid=$(pgrep -n -f "^ibv_rc_pingpong -g 0 -p $PORT")
    t0=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
    sleep 10
    t1=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
    kill "$pid" 2>/dev/null || true
    wait 2>/dev/null || true
    echo "idle $layer cpu_percent $(echo "$t0 $t1 $hz" | awk '{printf "%.2f", ($2 - $1) / $3 / 10 * 100}')"
done
