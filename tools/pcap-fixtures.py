#!/usr/bin/env python3
"""Make test inputs for `uroce pcap-check` from a classic Ethernet pcap.

Used by test-pcap-check.sh.  Every command reads IN and writes OUT:

  flip-icrc IN OUT       flip one bit of the ICRC of the first RoCEv2 frame
  bad-tver IN OUT        set the BTH TVer of the first RoCEv2 frame to 1 (malformed)
  truncate IN OUT        cut the file in the middle of a record's data
  bad-caplen IN OUT      IN's file header, then a record claiming caplen 0x7fffffff
  snap IN OUT N          cut every record to N bytes, keeping its original length
  vlan IN OUT N          give every frame N 802.1Q tags (N = 1 or 2)
  ipv6 IN OUT            turn IPv4 RoCEv2 frames into IPv6 ones, ICRC recomputed here
  sll IN OUT             Linux cooked capture v1 (DLT_LINUX_SLL)
  sll2 IN OUT            Linux cooked capture v2 (DLT_LINUX_SLL2)

The ICRC here is computed independently of lib/wire (zlib's CRC-32 over the
masked pseudo-header, IBA A17.3.3), so the IPv6 check is a real cross-check.
"""

import struct
import sys
import zlib

PCAP_MAGIC = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
FILE_HDR = 24
REC_HDR = 16
DLT_EN10MB = 1
DLT_LINUX_SLL = 113
DLT_LINUX_SLL2 = 276

ETH_HDR = 14
ETH_ADDRS = 12
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_QINQ = 0x88A8
VLAN_TAG = 4
IPV6_HDR = 40
UDP_HDR = 8
BTH_LEN = 12
BTH_TVER_BYTE = 1
BTH_RESV8A_BYTE = 4
ICRC_LEN = 4
IP_PROTO_UDP = 17
ROCE_PORT = 4791
ARPHRD_ETHER = 1
SLL_OUTGOING = 4


def read_pcap(path):
    """(endian, file header bytes, link type, [(ts_sec, ts_frac, wire_len, data)])"""
    raw = open(path, "rb").read()
    magic = struct.unpack("<I", raw[:4])[0]
    endian = "<" if magic in (PCAP_MAGIC, PCAP_MAGIC_NS) else ">"
    header = raw[:FILE_HDR]
    link = struct.unpack(endian + "I", raw[20:24])[0]
    records = []
    off = FILE_HDR
    while off + REC_HDR <= len(raw):
        sec, frac, caplen, wire_len = struct.unpack(endian + "IIII", raw[off:off + REC_HDR])
        off += REC_HDR
        records.append((sec, frac, wire_len, bytearray(raw[off:off + caplen])))
        off += caplen
    return endian, header, link, records


def write_pcap(path, endian, header, link, records):
    out = bytearray(header[:20]) + struct.pack(endian + "I", link)
    for sec, frac, wire_len, data in records:
        out += struct.pack(endian + "IIII", sec, frac, len(data), wire_len) + data
    open(path, "wb").write(out)


def same_size(records):
    """Records whose wire length is their (possibly changed) captured length."""
    return [(s, f, len(d), d) for s, f, _, d in records]


def l3_offset(frame):
    """(offset of the IP header, EtherType) past any VLAN tags."""
    off = ETH_HDR
    etype = struct.unpack(">H", frame[ETH_ADDRS:ETH_HDR])[0]
    while etype in (ETHERTYPE_VLAN, ETHERTYPE_QINQ):
        etype = struct.unpack(">H", frame[off + 2:off + VLAN_TAG])[0]
        off += VLAN_TAG
    return off, etype


def roce_layout(frame):
    """(ip offset, ip header length, udp offset, ip end) of an IPv4 RoCEv2 frame, else None."""
    if len(frame) < ETH_HDR:
        return None
    l3, etype = l3_offset(frame)
    if etype != ETHERTYPE_IPV4 or frame[l3 + 9] != IP_PROTO_UDP:
        return None
    ihl = (frame[l3] & 0x0F) * 4
    udp = l3 + ihl
    if struct.unpack(">H", frame[udp + 2:udp + 4])[0] != ROCE_PORT:
        return None
    total = struct.unpack(">H", frame[l3 + 2:l3 + 4])[0]
    return l3, ihl, udp, l3 + total


def first_roce(records):
    for i, rec in enumerate(records):
        layout = roce_layout(rec[3])
        if layout:
            return i, layout
    sys.exit("no IPv4 RoCEv2 frame in the input")


def icrc(ip_packet, ip_hdr_len, ipv6):
    """The ICRC of an IP packet whose last 4 bytes are the ICRC."""
    masked = bytearray(ip_packet[:-ICRC_LEN])
    if ipv6:
        masked[0] |= 0x0F
        masked[1:4] = b"\xff\xff\xff"
        masked[7] = 0xFF
    else:
        masked[1] = 0xFF
        masked[8] = 0xFF
        masked[10:12] = b"\xff\xff"
    udp = ip_hdr_len
    masked[udp + 6:udp + 8] = b"\xff\xff"
    masked[udp + UDP_HDR + BTH_RESV8A_BYTE] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(masked)) & 0xFFFFFFFF)


# ---- commands ----------------------------------------------------------------

def cmd_flip_icrc(src, dst):
    endian, header, link, recs = read_pcap(src)
    i, (_, _, _, end) = first_roce(recs)
    recs[i][3][end - 1] ^= 0x01
    write_pcap(dst, endian, header, link, recs)
    print(f"flipped the ICRC of frame {i + 1}")


def cmd_bad_tver(src, dst):
    endian, header, link, recs = read_pcap(src)
    i, (_, _, udp, _) = first_roce(recs)
    recs[i][3][udp + UDP_HDR + BTH_TVER_BYTE] |= 0x01
    write_pcap(dst, endian, header, link, recs)
    print(f"set TVer of frame {i + 1}")


def cmd_truncate(src, dst):
    raw = open(src, "rb").read()
    endian = "<" if struct.unpack("<I", raw[:4])[0] in (PCAP_MAGIC, PCAP_MAGIC_NS) else ">"
    caplen = struct.unpack(endian + "I", raw[FILE_HDR + 8:FILE_HDR + 12])[0]
    second = FILE_HDR + REC_HDR + caplen  # the second record's header
    caplen2 = struct.unpack(endian + "I", raw[second + 8:second + 12])[0]
    open(dst, "wb").write(raw[:second + REC_HDR + caplen2 // 2])


def cmd_bad_caplen(src, dst):
    raw = open(src, "rb").read()
    endian = "<" if struct.unpack("<I", raw[:4])[0] in (PCAP_MAGIC, PCAP_MAGIC_NS) else ">"
    huge = 0x7FFFFFFF
    record = struct.pack(endian + "IIII", 0, 0, huge, huge) + bytes(64)
    open(dst, "wb").write(raw[:FILE_HDR] + record)


def cmd_snap(src, dst, snaplen):
    endian, header, link, recs = read_pcap(src)
    recs = [(s, f, n, d[:int(snaplen)]) for s, f, n, d in recs]
    write_pcap(dst, endian, header, link, recs)


def cmd_vlan(src, dst, count):
    endian, header, link, recs = read_pcap(src)
    tpids = {1: [ETHERTYPE_VLAN], 2: [ETHERTYPE_QINQ, ETHERTYPE_VLAN]}[int(count)]
    tags = b"".join(struct.pack(">HH", tpid, 0x2000 | (100 + k)) for k, tpid in enumerate(tpids))
    recs = [(s, f, n, d[:ETH_ADDRS] + tags + d[ETH_ADDRS:]) for s, f, n, d in recs]
    write_pcap(dst, endian, header, link, same_size(recs))


def to_ipv6(frame):
    layout = roce_layout(frame)
    if not layout:
        return frame
    l3, ihl, udp, end = layout
    v4 = frame[l3:end]
    tos, ttl = v4[1], v4[8]
    flow_label = 0x12345  # masked by the ICRC, so any value will do
    udp_and_rest = bytearray(frame[udp:end])
    hdr = struct.pack(">IHBB", (6 << 28) | (tos << 20) | flow_label, len(udp_and_rest), IP_PROTO_UDP, ttl)
    hdr += b"\xfd" + bytes(11) + v4[12:16] + b"\xfd" + bytes(11) + v4[16:20]
    packet = bytearray(hdr) + udp_and_rest
    packet[-ICRC_LEN:] = icrc(packet, IPV6_HDR, True)
    eth = bytearray(frame[:l3])
    eth[l3 - 2:l3] = struct.pack(">H", ETHERTYPE_IPV6)
    return eth + packet


def cmd_ipv6(src, dst):
    endian, header, link, recs = read_pcap(src)
    recs = [(s, f, n, to_ipv6(d)) for s, f, n, d in recs]
    write_pcap(dst, endian, header, link, same_size(recs))


def sll_header(frame, v2):
    src_mac = frame[6:12]
    protocol = frame[ETH_ADDRS:ETH_HDR]  # VLAN tags stay in the payload, as libpcap writes them
    addr = bytes(src_mac) + bytes(2)
    if v2:
        return protocol + bytes(2) + struct.pack(">IHBB", 1, ARPHRD_ETHER, SLL_OUTGOING, 6) + addr
    return struct.pack(">HHH", SLL_OUTGOING, ARPHRD_ETHER, 6) + addr + protocol


def cmd_cooked(src, dst, v2):
    endian, header, link, recs = read_pcap(src)
    recs = [(s, f, n, sll_header(d, v2) + d[ETH_HDR:]) for s, f, n, d in recs]
    write_pcap(dst, endian, header, DLT_LINUX_SLL2 if v2 else DLT_LINUX_SLL, same_size(recs))


COMMANDS = {
    "flip-icrc": cmd_flip_icrc,
    "bad-tver": cmd_bad_tver,
    "truncate": cmd_truncate,
    "bad-caplen": cmd_bad_caplen,
    "snap": cmd_snap,
    "vlan": cmd_vlan,
    "ipv6": cmd_ipv6,
    "sll": lambda s, d: cmd_cooked(s, d, False),
    "sll2": lambda s, d: cmd_cooked(s, d, True),
}

if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
