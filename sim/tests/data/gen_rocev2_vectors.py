#!/usr/bin/env python3
"""Generates rocev2_vectors.txt: RoCEv2 frames built with scapy (>= 2.8, whose
scapy.contrib.roce computes the ICRC independently of ferroverbs), for
sim/tests/wire_reference.rs to compare the simulator's emitter against byte for byte.

scapy's RoCE module has only the BTH and AETH; the other extension headers are packed
here with struct from the layouts of shared/reference/rocev2-wire.md §2.2.

Run: python3 gen_rocev2_vectors.py > rocev2_vectors.txt

The frames were also decoded with tshark 4.0.17 (Debian 12) as a one-off check: every
BTH, RETH, AETH, DETH, AtomicETH, AtomicAckETH, ImmDt and IETH field reads back as
generated.

Output, one frame per line:
    <name> <headers-hex> <payload> <pad+icrc-hex>
where <payload> is `hex:<hex>` or `pattern:<len>` (byte i = (i * 31 + 7) & 0xff).
"""
import struct

from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
IP_A, IP_B = "192.168.0.1", "192.168.0.2"
QP_A, QP_B = 0x11, 0x12
SPORT = 0xC132  # rdma_get_udp_sport(0, 0x11, 0x12), reference §1.1


def pattern(n):
    return bytes((i * 31 + 7) & 0xFF for i in range(n))


def reth(va, rkey, length):
    return struct.pack("!QII", va, rkey, length)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def deth(qkey, src_qp):
    return struct.pack("!IB", qkey, 0) + src_qp.to_bytes(3, "big")


def u32(v):
    return struct.pack("!I", v)


def u64(v):
    return struct.pack("!Q", v)


def frame(name, opcode, psn, ext=b"", payload=b"", a_to_b=True, payload_kind="hex",
          se=0, ackreq=0, aeth=None, tos=0, ttl=64, fecn=0, becn=0, dqpn=None):
    pad = (-len(payload)) & 3
    if a_to_b:
        eth, ip = Ether(src=MAC_A, dst=MAC_B), IP(src=IP_A, dst=IP_B)
        dq = QP_B
    else:
        eth, ip = Ether(src=MAC_B, dst=MAC_A), IP(src=IP_B, dst=IP_A)
        dq = QP_A
    if dqpn is not None:
        dq = dqpn
    ip.id, ip.flags, ip.ttl, ip.tos = 0, "DF", ttl, tos
    bth = BTH(opcode=opcode, solicited=se, padcount=pad, pkey=0xFFFF, dqpn=dq,
              ackreq=ackreq, psn=psn, fecn=fecn, becn=becn)
    if aeth is not None:
        syndrome, msn = aeth
        bth = bth / AETH(syndrome=syndrome, msn=msn)
    pkt = eth / ip / UDP(sport=SPORT, dport=4791, chksum=0) / bth / (ext + payload + b"\0" * pad)
    b = raw(pkt)
    head_len = len(b) - len(payload) - pad - 4
    head, tail = b[:head_len], b[head_len + len(payload):]
    assert b[head_len:head_len + len(payload)] == payload
    if payload_kind == "hex":
        p = "hex:" + payload.hex()
    else:
        assert payload == pattern(len(payload))
        p = "pattern:%d" % len(payload)
    print(name, head.hex(), p, tail.hex())


def main():
    # The frames of reference §7.4 (1-17), QP 0x11 (192.168.0.1) <-> QP 0x12 (.2).
    frame("rc_send_only", 0x04, 0, payload=b"hello", ackreq=1)
    frame("rc_send_only_imm", 0x05, 1, ext=u32(0x01020304), payload=b"imm-data!", ackreq=1, se=1)
    frame("rc_write_first", 0x06, 2, ext=reth(0x00007F0000001000, 0x1234, 600),
          payload=pattern(256), payload_kind="pattern")
    frame("rc_write_last", 0x08, 4, payload=pattern(88), payload_kind="pattern", ackreq=1)
    frame("rc_write_only_imm", 0x0B, 5, ext=reth(0x1000, 0x1234, 13) + u32(0xCAFEBABE),
          payload=b"write+imm 13b", ackreq=1)
    frame("rc_read_req", 0x0C, 6, ext=reth(0x7F0000000000, 0x2002, 9000), ackreq=1)
    frame("rc_read_resp_only", 0x10, 6, aeth=(0x1F, 3), payload=pattern(33),
          payload_kind="pattern", a_to_b=False)
    frame("rc_cmp_swap", 0x13, 7,
          ext=atomic_eth(0x2000, 0x3003, 0x1111222233334444, 0x5555666677778888), ackreq=1)
    frame("rc_atomic_ack", 0x12, 7, aeth=(0x1F, 4), ext=u64(0xDEADBEEFCAFEF00D), a_to_b=False)
    frame("rc_ack", 0x11, 8, aeth=(0x1F, 4), a_to_b=False)
    frame("rc_rnr_nak", 0x11, 9, aeth=(0x2E, 4), a_to_b=False)
    frame("rc_nak_seq", 0x11, 9, aeth=(0x60, 4), a_to_b=False)
    frame("rc_nak_access", 0x11, 10, aeth=(0x62, 4), a_to_b=False)
    frame("rc_send_last_inv", 0x16, 11, ext=u32(0xABCDEF01), payload=b"invalid", ackreq=1)
    frame("uc_send_only", 0x24, 12, payload=b"uc!!")
    frame("ud_send_only", 0x64, 13, ext=deth(0x11111111, QP_A), payload=pattern(20),
          payload_kind="pattern", dqpn=0x13)
    frame("ud_send_only_imm", 0x65, 14, ext=deth(0x80010000, QP_A) + u32(0x00C0FFEE),
          payload=b"gsi", dqpn=1)
    # 18: the masked fields (ECN = CE, TTL 3, FECN, BECN) leave the ICRC of frame 1 alone.
    frame("rc_send_only_masked", 0x04, 0, payload=b"hello", ackreq=1, tos=0x03, ttl=3,
          fecn=1, becn=1)

    # The wrap flow of reference §7.4 at PMTU 4096, starting at PSN 0xFFFFFE.
    send = pattern(10000)
    frame("wrap_send_first", 0x00, 0xFFFFFE, payload=send[:4096], payload_kind="pattern")
    frame("wrap_send_middle", 0x01, 0xFFFFFF, payload=pattern(4096), payload_kind="pattern")
    frame("wrap_send_last", 0x02, 0x000000, payload=pattern(1808), payload_kind="pattern",
          ackreq=1)
    frame("wrap_ack", 0x11, 0x000000, aeth=(0x1F, 1), a_to_b=False)
    frame("wrap_read_req", 0x0C, 0x000001, ext=reth(0x7F0000000000, 0x2002, 9000), ackreq=1)
    frame("wrap_read_resp_first", 0x0D, 0x000001, aeth=(0x1F, 2), payload=pattern(4096),
          payload_kind="pattern", a_to_b=False)
    frame("wrap_read_resp_middle", 0x0E, 0x000002, payload=pattern(4096),
          payload_kind="pattern", a_to_b=False)
    frame("wrap_read_resp_last", 0x0F, 0x000003, aeth=(0x1F, 2), payload=pattern(808),
          payload_kind="pattern", a_to_b=False)
    frame("wrap_write_out_of_order", 0x0A, 0x000005, ext=reth(0x1000, 0x1234, 8),
          payload=pattern(8), payload_kind="pattern", ackreq=1)
    frame("wrap_nak_seq", 0x11, 0x000004, aeth=(0x60, 2), a_to_b=False)

    # The remaining opcodes, one frame each.
    frame("rc_send_first", 0x00, 20, payload=pattern(256), payload_kind="pattern")
    frame("rc_send_middle", 0x01, 21, payload=pattern(256), payload_kind="pattern")
    frame("rc_send_last", 0x02, 22, payload=pattern(1), payload_kind="pattern", ackreq=1)
    frame("rc_send_last_imm", 0x03, 23, ext=u32(0xFFFFFFFF), payload=pattern(2),
          payload_kind="pattern", ackreq=1, se=1)
    frame("rc_write_middle", 0x07, 24, payload=pattern(256), payload_kind="pattern")
    frame("rc_write_last_imm", 0x09, 25, ext=u32(0x7), payload=pattern(3),
          payload_kind="pattern", ackreq=1)
    frame("rc_write_only", 0x0A, 26, ext=reth(0xFFFFFFFFFFFFFFF8, 0xFFFFFFFF, 0),
          ackreq=1)
    frame("rc_read_resp_first", 0x0D, 27, aeth=(0x1F, 0xFFFFFF), payload=pattern(256),
          payload_kind="pattern", a_to_b=False)
    frame("rc_read_resp_middle", 0x0E, 28, payload=pattern(256), payload_kind="pattern",
          a_to_b=False)
    frame("rc_read_resp_last", 0x0F, 29, aeth=(0x00, 0), payload=pattern(255),
          payload_kind="pattern", a_to_b=False)
    frame("rc_fetch_add", 0x14, 30, ext=atomic_eth(0x3008, 0x3003, 1, 0), ackreq=1)
    frame("rc_send_only_inv", 0x17, 31, ext=u32(0x00000102), ackreq=1)
    frame("rc_nak_inv_req", 0x11, 32, aeth=(0x61, 9), a_to_b=False)
    frame("rc_nak_rem_op", 0x11, 33, aeth=(0x63, 9), a_to_b=False)
    frame("rc_nak_inv_rd_req", 0x11, 34, aeth=(0x64, 9), a_to_b=False)
    frame("uc_send_first", 0x20, 40, payload=pattern(256), payload_kind="pattern")
    frame("uc_send_middle", 0x21, 41, payload=pattern(256), payload_kind="pattern")
    frame("uc_send_last", 0x22, 42, payload=pattern(17), payload_kind="pattern")
    frame("uc_send_last_imm", 0x23, 43, ext=u32(0x12345678), payload=pattern(18),
          payload_kind="pattern")
    frame("uc_send_only_imm", 0x25, 44, ext=u32(0x9ABCDEF0), payload=b"")
    frame("uc_write_first", 0x26, 45, ext=reth(0x4000, 0x55, 1000), payload=pattern(256),
          payload_kind="pattern")
    frame("uc_write_middle", 0x27, 46, payload=pattern(256), payload_kind="pattern")
    frame("uc_write_last", 0x28, 47, payload=pattern(232), payload_kind="pattern")
    frame("uc_write_last_imm", 0x29, 48, ext=u32(0x1), payload=pattern(19),
          payload_kind="pattern")
    frame("uc_write_only", 0x2A, 49, ext=reth(0x4000, 0x55, 5), payload=pattern(5),
          payload_kind="pattern")
    frame("uc_write_only_imm", 0x2B, 50, ext=reth(0x4000, 0x55, 0) + u32(0x2), payload=b"")


if __name__ == "__main__":
    main()
