#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, made from the project's captures.

    seeds.py OUT_DIR [CAPTURE_DIR ...]

Writes OUT_DIR/{rx,cm,pcap,config}/ (created, emptied first):
  rx      one input per RoCEv2 frame of the captures (at most 4 per opcode
          and capture), plus each capture's first frames as one input, in
          fuzz_rx.cpp's format: flags 0x07, then [length:2][frame] records;
          and, from each capture's first plain IPv4 RoCEv2 frame, the same
          frame marked CE and a CNP (opcode 0x81) made from its headers
          (the notification and reaction points' paths, transport/rnic/cc.cpp)
  cm      each capture's CM MADs (UD SENDs to QP 1) as one input in
          fuzz_cm.cpp's format: [op 0][flags 0][pick 0][256-byte MAD] each
  pcap    the captures themselves (those under 64 KiB)
  config  the example configuration files
CAPTURE_DIR defaults to tests/data/vectors (captures that may live in this
repository); pass ../shared/vectors as well when it is there.  Reads
classic pcap (either byte order) with Ethernet links; other files are
skipped.  Nothing here is third-party data: the inputs are cut from the
captures at run time.
"""
import hashlib
import os
import shutil
import struct
import sys

ROCE_PORT = 4791
MAX_PER_OPCODE = 4
FIRST_FRAMES = 12


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        return  # pcapng or not a capture
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        return
    at = 24
    while at + 16 <= len(data):
        _, _, incl, _ = struct.unpack(e + "IIII", data[at:at + 16])
        at += 16
        if at + incl > len(data):
            return
        yield data[at:at + incl]
        at += incl


def roce_info(frame):
    """(bth offset, opcode, dest qp) of a RoCEv2 frame, or None."""
    at = 12
    etype = struct.unpack(">H", frame[at:at + 2])[0] if len(frame) >= 14 else 0
    at += 2
    while etype in (0x8100, 0x88A8) and len(frame) >= at + 4:
        etype = struct.unpack(">H", frame[at + 2:at + 4])[0]
        at += 4
    if etype == 0x0800 and len(frame) >= at + 20:
        ihl = (frame[at] & 0x0F) * 4
        if frame[at + 9] != 17:
            return None
        udp = at + ihl
    elif etype == 0x86DD and len(frame) >= at + 40:
        if frame[at + 6] != 17:
            return None
        udp = at + 40
    else:
        return None
    if len(frame) < udp + 8 + 12 or struct.unpack(">H", frame[udp + 2:udp + 4])[0] != ROCE_PORT:
        return None
    bth = udp + 8
    dest_qp = struct.unpack(">I", frame[bth + 4:bth + 8])[0] & 0xFFFFFF
    return bth, frame[bth], dest_qp


def record(frame):
    return struct.pack(">H", len(frame)) + frame


def ipv4_checksum(hdr):
    total = sum(struct.unpack(">10H", hdr[:20]))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def congestion_variants(frame):
    """(the frame marked CE, a CNP from its headers), or None when it is not
    untagged IPv4 without options.  The ICRC is left for fuzz_rx to fix."""
    if len(frame) < 14 + 20 + 8 + 12 + 4 or frame[12:14] != b"\x08\x00" or frame[14] != 0x45:
        return None
    ce = bytearray(frame)
    ce[15] |= 0x03
    ce[24:26] = b"\x00\x00"
    ce[24:26] = struct.pack(">H", ipv4_checksum(bytes(ce[14:34])))
    cnp = bytearray(frame[:14 + 20 + 8 + 12]) + bytes(16) + bytes(4)
    cnp[15] = 48 << 2
    cnp[16:18] = struct.pack(">H", 20 + 8 + 12 + 16 + 4)
    cnp[24:26] = b"\x00\x00"
    cnp[24:26] = struct.pack(">H", ipv4_checksum(bytes(cnp[14:34])))
    cnp[38:40] = struct.pack(">H", 8 + 12 + 16 + 4)
    cnp[42] = 0x81          # opcode
    cnp[43] = 0x00          # SE, M, PadCnt, TVer
    cnp[46] = 0x40          # BECN
    cnp[50] = 0x00          # AckReq, reserved
    cnp[51:54] = b"\x00\x00\x00"  # PSN 0
    return bytes(ce), bytes(cnp)


def write(dirname, payload):
    name = hashlib.sha1(payload).hexdigest()[:16]
    with open(os.path.join(dirname, name), "wb") as f:
        f.write(payload)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    dirs = sys.argv[2:] or [os.path.join(root, "tests", "data", "vectors")]
    kinds = {k: os.path.join(out, k) for k in ("rx", "cm", "pcap", "config")}
    for d in kinds.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    captures = []
    for d in dirs:
        for base, _, files in os.walk(d):
            captures += [os.path.join(base, f) for f in sorted(files) if f.endswith(".pcap")]
    counts = {k: 0 for k in kinds}
    for cap in sorted(captures):
        per_opcode = {}
        first = b""
        mads = b""
        n_first = 0
        varied = False
        for fr in frames(cap):
            info = roce_info(fr)
            if info is None:
                continue
            bth, opcode, dest_qp = info
            if not varied:
                v = congestion_variants(fr)
                if v is not None:
                    varied = True
                    for x in v:
                        write(kinds["rx"], b"\x07" + record(x))
                        counts["rx"] += 1
            if n_first < FIRST_FRAMES:
                first += record(fr)
                n_first += 1
            if per_opcode.get(opcode, 0) < MAX_PER_OPCODE:
                per_opcode[opcode] = per_opcode.get(opcode, 0) + 1
                write(kinds["rx"], b"\x07" + record(fr))
                counts["rx"] += 1
            # A UD SEND ONLY (0x64) to QP 1: BTH 12 + DETH 8, then the MAD.
            if opcode == 0x64 and dest_qp == 1 and len(fr) >= bth + 20 + 256:
                mads += b"\x00\x00\x00" + fr[bth + 20:bth + 20 + 256]
        if first:
            write(kinds["rx"], b"\x07" + first)
            counts["rx"] += 1
        if mads:
            write(kinds["cm"], mads)
            counts["cm"] += 1
        if os.path.getsize(cap) <= 64 * 1024:
            shutil.copy(cap, os.path.join(kinds["pcap"], os.path.basename(cap)))
            counts["pcap"] += 1
    for toml in ("scripts/uroce.example.toml", "tests/apps/sim2.toml"):
        p = os.path.join(root, toml)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(kinds["config"], os.path.basename(p)))
            counts["config"] += 1
    print("seeds: " + ", ".join(f"{k} {counts[k]}" for k in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
