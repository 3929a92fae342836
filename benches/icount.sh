#!/usr/bin/env bash
# Instruction counts of the verbs fast path under valgrind (callgrind).
#
# Builds examples/fastpath_icount in release mode and runs each case with callgrind
# collecting only inside the measured `icount_*` function; prints instructions per
# operation (Ir / iterations). Usage: benches/icount.sh [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
cargo build --release --quiet --example fastpath_icount
BIN=${CARGO_TARGET_DIR:-target}/release/examples/fastpath_icount
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
printf '%-8s %12s %10s %s\n' case Ir iterations Ir/op
CASES=${CASES:-inline inline_db send send_db list16 recv poll empty t_inline t_inline_db t_send t_send_db t_list16 t_poll t_empty o_inline o_inline_db o_send o_send_db}
for c in $CASES; do
    fn='*icount_post_send*'
    case $c in
        poll|empty) fn='*icount_poll*' ;;
        t_poll|t_empty) fn='*icount_take_one*' ;;
        recv) fn='*icount_post_recv*' ;;
        t_inline*) fn='*icount_post_typed_inline*' ;;
        t_send*) fn='*icount_post_typed_send*' ;;
        t_list16) fn='*icount_post_typed_list*' ;;
        o_inline*) fn='*icount_post_one_inline*' ;;
        o_send*) fn='*icount_post_one_send*' ;;
    esac
    valgrind --tool=callgrind --toggle-collect="$fn" \
        --callgrind-out-file="$OUT/$c.out" "$BIN" "$c" "$N" >/dev/null 2>"$OUT/$c.log"
    ir=$(awk '/^summary:/ {print $2}' "$OUT/$c.out")
    per=$(awk -v a="$ir" -v b="$N" 'BEGIN { printf "%.1f", a / b }')
    extra=""
    if [ "$c" = list16 ] || [ "$c" = t_list16 ]; then
        extra=$(awk -v a="$ir" -v b="$N" 'BEGIN { printf "  (%.1f per WR)", a / b / 16 }')
    fi
    printf '%-8s %12s %10s %s%s\n' "$c" "$ir" "$N" "$per" "$extra"
done
