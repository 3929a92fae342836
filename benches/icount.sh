#!/usr/bin/env bash
# Instruction counts of the verbs fast path under valgrind (callgrind).
#
# Builds examples/fastpath_icount in release mode and runs each case with callgrind
# collecting only inside the measured `icount_*` function; prints instructions per
# operation (Ir / iterations). The c_* cases measure the drop-in libibverbs' C entry
# points (benches/verbs_icount.c; needs gcc and libibverbs-dev). Usage:
# benches/icount.sh [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
cargo build --release --quiet --example fastpath_icount
BIN=${CARGO_TARGET_DIR:-target}/release/examples/fastpath_icount
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
printf '%-8s %12s %10s %s\n' case Ir iterations Ir/op
CASES=${CASES:-inline inline_db send send_db list16 recv poll poll16 empty rpoll t_inline t_inline_db t_send t_send_db t_list16 t_poll t_empty o_inline o_inline_db o_send o_send_db poll128 empty128 rpoll128 t_poll128 t_empty128 c_post c_poll c_list16 u_post u_poll}
# The C entry points (c_post: ibv_post_send of one signaled 64-byte inline SEND;
# c_poll: ibv_poll_cq of one CQE; c_list16: ibv_post_send of a list of 16 SENDs of
# one gather entry): benches/verbs_icount.c, a C program built here
# against <infiniband/verbs.h> (libibverbs-dev) and run on the built drop-in
# libibverbs.so.1, with a simulated NIC of its own process on a loopback address of
# its own (FERROVERBS_DEVICE), BlueFlame off (MLX5_SHUT_UP_BF=1: the 8-byte doorbell,
# as on VFIO's uncached BAR0). The simulated device's work behind the doorbell (its
# Bus::write64, one store to BAR0 on a ConnectX) is left out: a second toggle on it
# inside the measured function.
c_case() {
    local c=$1 extra=()
    if [ "$c" = c_post ] || [ "$c" = c_list16 ]; then
        extra=(--toggle-collect='*SimBus as ferroverbs_hw::bus::Bus>::write64')
    fi
    FERROVERBS_DEVICE=sim:127.0.0.93 MLX5_SHUT_UP_BF=1 LD_LIBRARY_PATH="$LIB" \
        valgrind --tool=callgrind --toggle-collect='icount_c_*' "${extra[@]}" \
        --callgrind-out-file="$OUT/$c.out" "$OUT/verbs_icount" "$c" "$N" >/dev/null 2>"$OUT/$c.log"
}
# The same C program on rdma-core's own libibverbs and libmlx5 under `ferroverbs run`
# (the uAPI layer, docs/uapi.md): u_post is libmlx5's ibv_post_send of the same SEND,
# u_poll its ibv_poll_cq of one CQE (through the layer's busy-poll wrapper of the
# context's poll_cq entry, uapi/src/poll_assist.rs): the peer to beat. The doorbell
# store traps into the layer (uapi/src/mmio_trap.rs), whose handler (the device's
# MMIO decoder and work, one store on a ConnectX) is left out. U_N iterations (default 2000: every
# message crosses the layer's device threads, which valgrind runs one at a time).
u_case() {
    local c=$1
    FERROVERBS_UAPI_LIB="$ULIB" MLX5_SHUT_UP_BF=1 timeout 1800 "$UBIN" run --device sim:127.0.0.94 -- \
        valgrind --tool=callgrind --toggle-collect='icount_c_*' --toggle-collect='*mmio_trap*on_segv*' \
        --callgrind-out-file="$OUT/$c.out" "$OUT/verbs_icount" "c_${c#u_}" "$UN" >/dev/null 2>"$OUT/$c.log"
}
UN=${U_N:-2000}
case " $CASES " in
    *" u_"*)
        # Two builds: `--bin` would restrict the uAPI package to binaries (it has none:
        # its library is the preload object).
        cargo build --release --quiet -p ferroverbs-uapi
        cargo build --release --quiet -p ferroverbs-workspace --bin ferroverbs
        UBIN=${CARGO_TARGET_DIR:-target}/release/ferroverbs
        ULIB=$(realpath "${CARGO_TARGET_DIR:-target}/release/libferroverbs_uapi.so")
        ;;
esac
case " $CASES " in
    *" c_"* | *" u_"*)
        cargo build --release --quiet -p ferroverbs-ibverbs
        gcc -O2 -Wall -o "$OUT/verbs_icount" benches/verbs_icount.c -libverbs
        LIB="$OUT/lib"
        mkdir -p "$LIB"
        ln -sf "$PWD/target/release/libibverbs.so" "$LIB/libibverbs.so.1"
        ;;
esac
for c in $CASES; do
    fn='*icount_post_send*'
    case $c in
        poll|poll16|empty|rpoll|poll128|empty128|rpoll128) fn='*icount_poll*' ;;
        t_poll|t_empty|t_poll128|t_empty128) fn='*icount_take_one*' ;;
        recv) fn='*icount_post_recv*' ;;
        t_inline*) fn='*icount_post_typed_inline*' ;;
        t_send*) fn='*icount_post_typed_send*' ;;
        t_list16) fn='*icount_post_typed_list*' ;;
        o_inline*) fn='*icount_post_one_inline*' ;;
        o_send*) fn='*icount_post_one_send*' ;;
    esac
    n=$N
    case $c in
        c_*) c_case "$c" ;;
        u_*) u_case "$c"; n=$UN ;;
        *) valgrind --tool=callgrind --toggle-collect="$fn" \
            --callgrind-out-file="$OUT/$c.out" "$BIN" "$c" "$N" >/dev/null 2>"$OUT/$c.log" ;;
    esac
    ir=$(awk '/^summary:/ {print $2}' "$OUT/$c.out")
    per=$(awk -v a="$ir" -v b="$n" 'BEGIN { printf "%.1f", a / b }')
    extra=""
    if [ "$c" = list16 ] || [ "$c" = t_list16 ] || [ "$c" = c_list16 ]; then
        extra=$(awk -v a="$ir" -v b="$N" 'BEGIN { printf "  (%.1f per WR)", a / b / 16 }')
    elif [ "$c" = poll16 ]; then
        extra=$(awk -v a="$ir" -v b="$N" 'BEGIN { printf "  (%.1f per CQE)", a / b / 16 }')
    fi
    printf '%-8s %12s %10s %s%s\n' "$c" "$ir" "$n" "$per" "$extra"
done
