#!/usr/bin/env bash
# Scale with the number of QPs, the figures of docs/performance.md ("Many QPs"), as
# markdown tables:
#
# * the message rate of `ferroverbs perf write-bw -s 64` and `send-bw -s 64` with
#   -q 1, 16, 256, 1024 and 16384 QPs, about MSGS messages in all per run (-n MSGS/q,
#   at least 5 per QP): each N run `runs` times, each run right after a one-QP run,
#   and the ratio of the two medians (the machine may be noisy: ratios, not rates);
# * the same with one memory region per QP (`--mr_per_qp`, perftest's option), with
#   the time `ferroverbs perf` took to allocate and register each region (its stderr
#   line; the median of the runs);
# * memory per idle QP and per CQ with 16384 QPs (examples/scale.rs) against the
#   bytes the hardware format requires;
# * the time to create, connect and destroy N QPs and to register and deregister N
#   memory regions, per object, for N = 1024, 4096, 16384 (constant per object:
#   linear growth): the least of `runs` runs, because on a virtual machine the first
#   touch of a guest page the hypervisor has not backed yet costs several times a
#   page fault's usual time (system time, not the driver's); examples/scale.rs warms
#   the memory it will take first, which removes most but not all of it;
# * with CG_QPS="1 1024 16384": instructions and cache misses per message of the
#   same runs under callgrind (deterministic, unlike the rates), collected inside
#   `perf`'s measured loop (`runner::run_sizes`) less the statistics it computes
#   after (`stats::bw_report`); the simulated last level is a 2 MiB L2 (this
#   machine's; its L3 is shared with other VMs). `-u 20` (a 4.3 s ACK timeout):
#   under valgrind, 50 times slower, the default 67 ms timer comes due within a run
#   and two identical runs differed in the ACKs they sent.
#
# Usage: benches/scale.sh [runs]   (default 3; QPS="1 1024" and MSGS=... to choose,
# MR_QPS="1024" for the --mr_per_qp table (empty: none), CG_QPS as above (default
# none), FERROVERBS=<binary> to measure another build of the tool)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
MSGS=${MSGS:-200000}
QPS=${QPS:-"1 16 256 1024 16384"}
MR_QPS=${MR_QPS-"1024 16384"}
CG_QPS=${CG_QPS:-}
T=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet --bin ferroverbs --example scale
F=${FERROVERBS:-$T/release/ferroverbs}
SCALE=$T/release/examples/scale
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
load() { cut -d' ' -f1 /proc/loadavg; }
# The message rate (M/s) of one run: the last column of the line after the header.
rate() { "$F" perf "$1" -s 64 -q "$2" -n "$3" 2>/dev/null | awk '/#bytes/ { getline; print $NF }'; }
# The same with --mr_per_qp; the client's registration time per region (µs) goes to
# the file $4.
rate_mr() {
    "$F" perf "$1" -s 64 -q "$2" -n "$3" --mr_per_qp 2>"$OUT/err" | awk '/#bytes/ { getline; print $NF }'
    awk '/client: registered/ { sub(/^\(/, "", $(NF - 2)); print $(NF - 2) }' "$OUT/err" >>"$4"
}

echo "## Message rate with many QPs ($RUNS runs each, alternated with one QP; load average at start $(load))"
echo
echo "| QPs | write-bw M/s | 1 QP M/s | vs 1 QP | send-bw M/s | 1 QP M/s | vs 1 QP |"
echo "|---|---|---|---|---|---|---|"
for q in $QPS; do
    n=$((MSGS / q))
    [ "$n" -ge 5 ] || n=5
    row="| $q"
    for test in write-bw send-bw; do
        : >"$OUT/n"
        : >"$OUT/one"
        for _ in $(seq "$RUNS"); do
            rate "$test" 1 "$MSGS" >>"$OUT/one"
            rate "$test" "$q" "$n" >>"$OUT/n"
        done
        mn=$(median <"$OUT/n")
        m1=$(median <"$OUT/one")
        row="$row | $mn | $m1 | $(awk -v a="$mn" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')"
    done
    echo "$row |"
done
echo

if [ -n "$MR_QPS" ]; then
    echo "## One memory region per QP (\`--mr_per_qp\`; $RUNS runs each, alternated with one QP and one region; load average $(load))"
    echo
    echo "| QPs | write-bw M/s | 1 QP M/s | vs 1 QP | send-bw M/s | 1 QP M/s | vs 1 QP | register MR µs |"
    echo "|---|---|---|---|---|---|---|---|"
    for q in $MR_QPS; do
        n=$((MSGS / q))
        [ "$n" -ge 5 ] || n=5
        row="| $q"
        : >"$OUT/reg"
        for test in write-bw send-bw; do
            : >"$OUT/n"
            : >"$OUT/one"
            for _ in $(seq "$RUNS"); do
                rate "$test" 1 "$MSGS" >>"$OUT/one"
                rate_mr "$test" "$q" "$n" "$OUT/reg" >>"$OUT/n"
            done
            mn=$(median <"$OUT/n")
            m1=$(median <"$OUT/one")
            row="$row | $mn | $m1 | $(awk -v a="$mn" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')"
        done
        echo "$row | $(median <"$OUT/reg") |"
    done
    echo
fi

"$SCALE" --qps 16384 >"$OUT/mem"
get() { awk -v k="$1:" '$1 == k { print $2 }' "$2"; }
M=$OUT/mem
echo "## Memory with 16384 QPs (examples/scale.rs: 128 send and 128 receive requests, one SGE, 64 B inline; one CQ of $(get cq_entries "$M") entries)"
echo
echo "| object | hardware format | DMA memory | driver bookkeeping | simulator (engine + firmware) |"
echo "|---|---|---|---|---|"
echo "| idle QP | $(get qp_hw_bytes "$M") | $(get qp_dma_bytes "$M") | $(get qp_driver_bytes "$M") | $(get qp_sim_engine_bytes "$M") + $(get qp_sim_firmware_bytes "$M") |"
echo "| CQ | $(get cq_hw_bytes "$M") | $(get cq_dma_bytes "$M") | $(get cq_driver_bytes "$M") | $(get cq_sim_bytes "$M") |"
echo

echo "## Creation and destruction, per object (examples/scale.rs --mr-per-qp; the least of $RUNS runs)"
echo
echo "| N | CREATE_QP µs | connect (3 modifies) µs | DESTROY_QP µs | register MR µs | deregister MR µs |"
echo "|---|---|---|---|---|---|"
least() { sort -g | head -n 1; }
for n in 1024 4096 16384; do
    : >"$OUT/c"
    for _ in $(seq "$RUNS"); do
        "$SCALE" --qps "$n" --mr-per-qp >>"$OUT/c"
    done
    col() { awk -v k="$1:" '$1 == k { print $2 }' "$OUT/c" | least; }
    echo "| $n | $(col create_qp_us) | $(col connect_qp_us) | $(col destroy_qp_us) | $(col reg_mr_us) | $(col dereg_mr_us) |"
done

if [ -n "$CG_QPS" ]; then
    echo
    echo "## Per message under callgrind (--D1=49152,12,64 --LL=2097152,16,64; -u 20)"
    echo
    echo "| test | QPs | messages | instructions | D1 misses | L2-sized misses |"
    echo "|---|---|---|---|---|---|"
    for test in write-bw send-bw; do
        for q in $CG_QPS; do
            n=$((MSGS / q))
            [ "$n" -ge 5 ] || n=5
            timeout 3000 valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL=2097152,16,64 \
                --toggle-collect='*runner::run_sizes*' --toggle-collect='*stats::bw_report*' \
                --callgrind-out-file="$OUT/cg.out" "$F" perf "$test" -s 64 -q "$q" -n "$n" -u 20 \
                >/dev/null 2>&1
            # The summary line, its columns named by the events line.
            awk -v t="$test" -v q="$q" -v m=$((q * n)) '
                /^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
                /^summary:/ {
                    printf "| %s | %d | %d | %.0f | %.2f | %.2f |\n", t, q, m, $col["Ir"] / m,
                        ($col["D1mr"] + $col["D1mw"]) / m,
                        ($col["ILmr"] + $col["DLmr"] + $col["DLmw"]) / m
                }' "$OUT/cg.out"
        done
    done
fi
