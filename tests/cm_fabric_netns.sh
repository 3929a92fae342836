#!/bin/sh
# libfabric's verbs provider on two simulated NICs under `ferroverbs run`: fi_info
# lists FI_EP_MSG, and fi_pingpong runs between two processes over FI_EP_MSG (verbs
# RC connected by rdma_cm) and FI_EP_RDM (ofi_rxm over verbs MSG: the address
# fi_av_insert takes is the peer's rxm listener, an rdma_cm id bound to port 0 that
# must report the ephemeral port it was given), data checked (-c).
#
# The verbs provider offers FI_EP_MSG only for a device with an address on an
# interface that is up and not loopback (`vrb_getifaddrs` skips IFF_LOOPBACK): the
# two NICs take 10.77.0.1 and 10.77.0.2 on a veth pair in a network namespace of
# their own, so the host's interfaces are untouched. Needs root (unshare) and
# libfabric-bin:
#
#   sudo tests/cm_fabric_netns.sh target/debug/ferroverbs
#
# Prints "PASS name" / "FAIL name" per check and exits 1 on a failure.
set -u
FV=$1
if [ "${FERROVERBS_NETNS:-}" != 1 ]; then
    # Re-enter in a new network namespace.
    FERROVERBS_NETNS=1 exec unshare -n "$0" "$@"
fi
ip link set lo up
ip link add fv0 type veth peer name fv1
ip addr add 10.77.0.1/24 dev fv0
ip addr add 10.77.0.2/24 dev fv1
ip link set fv0 up
ip link set fv1 up
out=$(mktemp -d)
fail=0
check() {
    if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1"; fail=1; fi
}
timeout 120 "$FV" run --device sim:10.77.0.1 -- fi_info -p verbs -t FI_EP_MSG >"$out/info" 2>&1
grep -q "type: FI_EP_MSG" "$out/info"
check "fi_info -p verbs lists FI_EP_MSG" $?
port=47592
for ep in msg rdm; do
    port=$((port + 1))
    timeout 300 "$FV" run --device sim:10.77.0.1 -- \
        fi_pingpong -p verbs -e $ep -B $port -I 100 -S 65536 -c >"$out/s" 2>&1 &
    s=$!
    # The client again while the server's control port refuses it (its start-up),
    # for up to a minute.
    tries=0
    while :; do
        sleep 2
        timeout 280 "$FV" run --device sim:10.77.0.2 -- \
            fi_pingpong -p verbs -e $ep -P $port -I 100 -S 65536 -c 10.77.0.1 >"$out/c" 2>&1
        c=$?
        tries=$((tries + 1))
        grep -q "Connection refused" "$out/c" && [ $tries -lt 30 ] || break
    done
    wait $s
    sv=$?
    cat "$out/s" "$out/c"
    # Both sides print the 100 transfers, all acknowledged.
    grep -q "^64k *100 *=100 " "$out/s" && grep -q "^64k *100 *=100 " "$out/c"
    r=$?
    [ $c = 0 ] && [ $sv = 0 ] && [ $r = 0 ]
    check "fi_pingpong -e $ep (client $c, server $sv)" $?
done
rm -rf "$out"
exit $fail
