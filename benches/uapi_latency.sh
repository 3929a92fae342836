#!/bin/sh
# Round-trip latency of `ibv_rc_pingpong` and `ib_send_lat` between two processes on
# the userspace RDMA interface (rdma-core's libibverbs + libmlx5 under `ferroverbs
# run`) and on the drop-in libibverbs.so.1, alternated RUNS times in one run, the
# ratios of their medians, and the CPU an idle program costs on each (an
# `ibv_rc_pingpong` server blocked in accept() for 10 s, its device, PD, MR, CQ and
# QP created).
#
#   benches/uapi_latency.sh [--release | PROFILE_DIR]    (default target/debug)
#
# --release builds both layers in release mode first (the figures of the docs);
# otherwise build first: cargo build -p ferroverbs-workspace -p ferroverbs-uapi
# -p ferroverbs-ibverbs. Prints one line per run, the medians and the ratios
# (this layer / the drop-in; the target is at most 1.5). NET (default 127.0.78)
# names the loopback /24 the NICs use. EVENTS=1 runs both tools with -e (they wait
# for completion events instead of busy polling). Needs ibverbs-utils and perftest.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
    --release)
        # Separate builds: `--bin` would leave out the two libraries.
        cargo build --release --quiet -p ferroverbs-workspace --bin ferroverbs
        cargo build --release --quiet -p ferroverbs-uapi -p ferroverbs-ibverbs
        T=${CARGO_TARGET_DIR:-target}/release ;;
    "") T=${CARGO_TARGET_DIR:-target}/debug ;;
    *) T=$1 ;;
esac
RUNS=${RUNS:-3}
E=
[ "${EVENTS:-0}" = 1 ] && E=-e
ITERS=${ITERS:-2000}
F=$T/ferroverbs
LIB=$(ls "$T"/libferroverbs_uapi.so "$T"/deps/libferroverbs_uapi.so 2>/dev/null | head -1)
DROP=$(mktemp -d)
ln -s "$(realpath "$T"/libibverbs.so)" "$DROP"/libibverbs.so.1
trap 'rm -rf "$DROP"' EXIT
PORT=${PORT:-19750}
NET=${NET:-127.0.78}

# pair LAYER TOOL ARGS...: prints the client's output.
pair() {
    layer=$1; tool=$2; shift 2
    PORT=$((PORT + 1))
    if [ "$layer" = uapi ]; then
        s="env FERROVERBS_UAPI_LIB=$LIB $F run --device sim:${NET}.1 --"
        c="env FERROVERBS_UAPI_LIB=$LIB $F run --device sim:${NET}.2 --"
    else
        s="env LD_LIBRARY_PATH=$DROP FERROVERBS_DEVICE=sim:${NET}.1"
        c="env LD_LIBRARY_PATH=$DROP FERROVERBS_DEVICE=sim:${NET}.2"
    fi
    timeout 300 $s "$tool" -p $PORT "$@" >/dev/null 2>&1 &
    sleep 1.5
    timeout 300 $c "$tool" -p $PORT "$@" ${NET}.1 2>&1 || true
    wait || true
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$RUNS"); do
    for layer in dropin uapi; do
        pp=$(pair $layer ibv_rc_pingpong -g 0 -n "$ITERS" $E | awk '/iters in/ {print $(NF-1)}')
        # ib_send_lat's columns: bytes iterations t_min t_max t_typical t_avg ...
        sl=$(pair $layer ib_send_lat -n "$ITERS" $E | awk '$1 == "2" {print $5, $6}' | head -1)
        set -- $sl
        echo "run $r $layer ibv_rc_pingpong_us_per_iter ${pp:-?} ib_send_lat_typical_us ${1:-?} ib_send_lat_avg_us ${2:-?}"
        echo "${pp:-999999}" >> "$DROP/pp_$layer"
        echo "${1:-999999}" >> "$DROP/slt_$layer"; echo "${2:-999999}" >> "$DROP/sla_$layer"
    done
done
for layer in dropin uapi; do
    echo "median $layer ibv_rc_pingpong_us_per_iter $(median < "$DROP/pp_$layer") ib_send_lat_typical_us $(median < "$DROP/slt_$layer") ib_send_lat_avg_us $(median < "$DROP/sla_$layer")"
done
for f in pp slt sla; do
    d=$(median < "$DROP/${f}_dropin"); u=$(median < "$DROP/${f}_uapi")
    case $f in pp) name=ibv_rc_pingpong_us_per_iter ;; slt) name=ib_send_lat_typical_us ;; *) name=ib_send_lat_avg_us ;; esac
    echo "ratio uapi/dropin $name $(echo "$u $d" | awk '{printf "%.2f", $1 / $2}') (target <= 1.5)"
done

# Idle CPU: CPU seconds (utime + stime, all threads) over 10 s of a server blocked
# in accept() with its device open.
hz=$(getconf CLK_TCK)
for layer in dropin uapi; do
    PORT=$((PORT + 1))
    if [ "$layer" = uapi ]; then
        env FERROVERBS_UAPI_LIB="$LIB" $F run --device sim:${NET}.3 -- ibv_rc_pingpong -g 0 -p $PORT >/dev/null 2>&1 &
    else
        env LD_LIBRARY_PATH="$DROP" FERROVERBS_DEVICE=sim:${NET}.3 ibv_rc_pingpong -g 0 -p $PORT >/dev/null 2>&1 &
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
