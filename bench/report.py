#!/usr/bin/python3
"""bench/run's report: results.csv -> report.md (each uroce figure beside
the wire's limit for it and their ratio, and the issue 16 targets), and
latency.png / bandwidth.png through gnuplot when it is installed.

The wire's limit for a figure, from the raw frames measured in the same
run (all on the same veth, same ports):
  - one-way latency of a message of s bytes: half the ping-pong RTT of the
    frame its first packet needs, plus the rest of its packets at the raw
    stream's frame rate for full-MTU frames;
  - ib_read_lat (perftest reports the whole round trip): a request frame's
    one-way time plus the response's, as above;
  - bandwidth: the raw stream's received frame rate at the frame the
    message's packets need, times the payload per frame; message rate:
    that frame rate (one packet per message up to the path MTU).
perftest's MB/s are MiB/s (2^20 bytes), as the wire's figures here.
"""
import argparse
import csv
import datetime
import json
import math
import os
import shutil
import subprocess
import tempfile
import sys

MIB = 1024 * 1024
READ_REQUEST_PAYLOAD = 16  # the RETH a READ request carries instead of data


def load(path):
    wire_rtt, wire_rate, uroce, startup, daemon, mempoll = {}, {}, {}, {}, {}, {}
    host_rtt, host_rate = {}, {}
    host_rc_rtt = {}  # raw ping-pong to the host with one frame ahead of each request and reply (RC's shape)
    host_relay_rc_rtt = {}  # the same through a relay thread at each end (uroce-wire-limit --relay)
    costs = {}  # cpu / heap / memory: kind -> (program, size) -> metric -> value
    failed = []  # (kind, program, size, runs that ended in an error)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["metric"] == "failed_runs":
                failed.append((row["kind"], row["program"], int(row["size"]), int(float(row["value"]))))
                continue
            if row["kind"] in ("cpu", "heap", "memory", "shape", "floor"):
                if row["value"] != "":
                    costs.setdefault(row["kind"], {}).setdefault(
                        (row["program"], int(row["size"])), {})[row["metric"]] = float(row["value"])
                continue
            if row["kind"] == "mempoll":  # programs that poll memory: program -> metric -> µs
                mempoll.setdefault(row["program"], {})[row["metric"]] = float(row["value"])
                continue
            if row["kind"] == "startup":  # uroce-startup: metric -> ms (median), or "" when it failed
                startup[row["metric"]] = float(row["value"]) if row["value"] != "" else None
                continue
            if row["kind"] == "daemon":  # through uroced: (program, size) -> metric -> value
                if row["value"] != "":
                    daemon.setdefault((row["program"], int(row["size"])), {})[row["metric"]] = float(row["value"])
                continue
            if row["value"] == "":
                uroce.setdefault((row["program"], int(row["size"])), {})
                continue
            v = float(row["value"])
            if row["kind"] == "wire_host":  # raw frames to the peer's own address: frame -> value
                target = {"ping": host_rtt, "ping_rc": host_rc_rtt,
                          "ping_relay_rc": host_relay_rc_rtt}.get(row["program"], host_rate)
                target[int(row["size"])] = v
            elif row["kind"] == "wire" and row["program"] == "ping":
                wire_rtt[int(row["size"])] = v
            elif row["kind"] == "wire" and row["program"] == "stream":
                wire_rate[int(row["size"])] = v
            elif row["kind"] == "wire" and row["program"] == "duplex":  # both ways at once, summed: frame -> fps
                costs.setdefault("duplex", {})[int(row["size"])] = v
            else:
                uroce.setdefault((row["program"], int(row["size"])), {})[row["metric"]] = v
    return (wire_rtt, wire_rate, uroce, startup, daemon, mempoll, (host_rtt, host_rate, host_rc_rtt, host_relay_rc_rtt),
            costs, failed)


class Wire:
    def __init__(self, rtt, rate, pmtu, overhead):
        self.rtt, self.rate, self.pmtu, self.overhead = rtt, rate, pmtu, overhead

    def frame(self, payload):
        return max(payload + self.overhead, 64)

    def one_way_us(self, size):
        first = self.rtt.get(self.frame(min(size, self.pmtu)))
        if first is None:
            return None
        packets = max(1, math.ceil(size / self.pmtu))
        rest = 0.0
        if packets > 1:
            full = self.rate.get(self.frame(self.pmtu))
            if not full:
                return None
            rest = (packets - 1) / full * 1e9
        return (first / 2 + rest) / 1000

    def read_us(self, size):
        req = self.rtt.get(self.frame(READ_REQUEST_PAYLOAD))
        resp = self.one_way_us(size)
        if req is None or resp is None:
            return None
        return req / 2 / 1000 + resp

    def bw_mib(self, size):
        payload = min(size, self.pmtu)
        rate = self.rate.get(self.frame(payload))
        return None if rate is None else rate * payload / MIB

    def msg_rate_mpps(self, size):
        if size > self.pmtu:
            return None
        rate = self.rate.get(self.frame(size))
        return None if rate is None else rate / 1e6


def fmt(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def fx(v):
    return "—" if v is None else f"{v:.2f}×"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


# Bytes a frame of `payload` RoCEv2 bytes takes on an Ethernet wire:
# Ethernet header 14, IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4, preamble and
# inter-frame gap 20 (a WRITE's middle packet: no RETH).
def wire_bytes(payload):
    return payload + 14 + 20 + 8 + 12 + 4 + 4 + 20


def floor_section(floor):
    """uroce's own CPU per frame with no kernel (rnic_bench, sim wire), and
    the cores a NIC at 25 and 100 Gbit/s would need at that cost."""
    L = ["### uroce's own CPU, no kernel: the sim wire, and what a fast NIC needs (issue 43)\n",
         "Both RNICs on one thread, frames handed over in memory (bench/rnic_bench.cpp): the CPU of both "
         "ends together, per full data frame of a 64 KiB WRITE (with its share of the ACKs) and per "
         "64 B SEND (its frame, its ACK share, both completions and the receive it consumes).  Beside it "
         "the least those bytes cost: copied into a frame with the ICRC computed, the ICRC verified and "
         "the payload copied out.\n",
         "| what | both ends, ns | copies and ICRC, ns | the rest, ns |",
         "|---|---:|---:|---:|"]
    per_frame = {}
    for (prog, size), m in sorted(floor.items()):
        if "ns_per_frame" in m:
            mtu = int(prog.rsplit(" ", 1)[1])
            per_frame[mtu] = m["ns_per_frame"]
            b = m.get("bound_ns_per_frame")
            L.append(f"| {size // 1024} KiB WRITE, per {mtu} B frame | {fmt(m['ns_per_frame'], 0)} | {fmt(b, 0)} | "
                     f"{fmt(m['ns_per_frame'] - b, 0) if b is not None else '—'} |")
        elif "ns_per_msg" in m:
            L.append(f"| {size} B SEND, per message | {fmt(m['ns_per_msg'], 0)} | — | — |")
    L.append("")
    if per_frame:
        L.append("Cores one direction of a link at line rate needs at that cost (frames per second at the "
                 "path MTU a 1500- and a 9000-byte Ethernet MTU carry, 1024 and 4096 B, times both ends' "
                 "CPU per frame; each end needs about half, and a NIC's PMD adds its own per-packet cost, "
                 "which the sim wire's hand-over only stands in for):\n")
        L.append("| link | path MTU | frames/s | both ends, cores | one end, about |")
        L.append("|---|---:|---:|---:|---:|")
        for gbit in (25, 100):
            for mtu, ns in sorted(per_frame.items()):
                fps = gbit * 1e9 / 8 / wire_bytes(mtu)
                cores = fps * ns * 1e-9
                L.append(f"| {gbit} Gbit/s | {mtu} | {fps / 1e6:.2f} M | {cores:.2f} | {cores / 2:.2f} |")
        L.append("")
    return L


def load_stages(path):
    """The last JSON object line of a uroce-stages --json output, or None."""
    try:
        with open(path) as f:
            lines = [l for l in f if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("out")
    ap.add_argument("--pmtu", type=int, default=1024)
    ap.add_argument("--overhead", type=int, default=58)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--machine", default="")
    ap.add_argument("--stages", action="append", default=[],
                    help="uroce-stages --json output (repeatable: one per progress mode)")
    a = ap.parse_args()
    rtt, rate, uroce, startup, daemon, mempoll, (host_rtt, host_rate, host_rc_rtt, host_relay_rc_rtt), costs, failed = \
        load(a.csv)
    w = Wire(rtt, rate, a.pmtu, a.overhead)
    rc_ow = Wire(host_rc_rtt, {}, a.pmtu, a.overhead).one_way_us(64)  # raw 64 B ping-pong in RC's shape
    wh = Wire(host_rtt, host_rate, a.pmtu, a.overhead)
    sizes = sorted({s for (_, s) in uroce})
    L = []
    L.append("# uroce against the wire: perftest over uroce beside raw frames, same wire, same run\n")
    L.append(f"Measured {datetime.date.today()} by `bench/run` (root), {a.rounds} run(s) per figure, "
             f"median kept. {a.machine}. Path MTU {a.pmtu} (IB MTU on a 1500-byte link). "
             "perftest through the drop-ins, default progress (an engine thread per process), "
             "`-x 0 -F`. Ratios are what to compare; absolute figures on a shared 2-core machine move "
             "from run to run.\n")

    L.append("## The wire (raw DPDK frames, uroce-wire-limit)\n")
    L.append("| frame B | ping-pong RTT µs (median) | one-way µs | stream frames/s received | payload MiB/s at this frame |")
    L.append("|---|---|---|---|---|")
    for f in sorted(set(rtt) | set(rate)):
        r = rtt.get(f)
        fr = rate.get(f)
        pay = None if fr is None else fr * (f - a.overhead) / MIB
        L.append(f"| {f} | {fmt(r / 1000 if r else None)} | {fmt(r / 2000 if r else None)} | "
                 f"{fmt(fr, 0)} | {fmt(pay, 1)} |")
    L.append("")

    if host_rtt or host_rate:
        big = max(sizes) if sizes else 0
        L.append("## The kernel's share: raw frames addressed as uroce's are\n")
        L.append("The wire's frames go to a MAC no interface owns: the far end's kernel drops each "
                 "one as soon as the packet sockets have their copy. uroce shares its netdev with the "
                 "kernel (net_af_packet), so its frames go to the peer's own MAC and address, and the "
                 "kernel would also take each one: IP input, a route lookup, the UDP 4791 socket uroce "
                 "holds so that no ICMP error answers. On a veth that work runs inside the sender's "
                 "`sendto`. Here the same raw frames are sent the way uroce sends them, with nothing "
                 "more (`uroce-wire-limit --to-mac --from-ip --to-ip --claim-udp`). uroce itself drops "
                 "its frames at tc ingress once its packet socket has its copy (a tcx program, "
                 "drivers/ingress_filter.hpp; DESIGN.md \"Configuration\"), so it pays the taps and "
                 "the veth of this share, not the stack. The targets below stay against the first "
                 "baseline; this one shows how much of the gap the host's own stack would take, which a "
                 "port the kernel does not share (net_af_xdp, a NIC's own PMD) does not pay at all. "
                 "RC's SEND ping-pong also puts one frame more on the wire per message "
                 "than the raw one: the ACK, which must reach the peer before the reply (its send "
                 "completion before its receive completion, as on every RNIC), and here costs a "
                 "frame's kernel path in the sender's `sendto`; UC has none, so its row is "
                 "uroce's own path.\n")
        L.append("| figure | raw, to no host | raw, to the host | uroce | uroce / raw to no host | uroce / raw to the host |")
        L.append("|---|---|---|---|---|---|")

        def krow(name, uv, a_v, h_v, digits=2):
            L.append(f"| {name} | {fmt(a_v, digits)} | {fmt(h_v, digits)} | {fmt(uv, digits)} | "
                     f"{fx(ratio(uv, a_v))} | {fx(ratio(uv, h_v))} |")

        krow("64 B one-way latency, µs (ib_send_lat)", uroce.get(("ib_send_lat", 64), {}).get("t_typical_us"),
             w.one_way_us(64), wh.one_way_us(64))
        krow("64 B one-way latency, µs (ib_send_lat), against raw frames in RC's shape: one frame ahead of "
             "each request and reply in its burst, as the ACK goes with a SEND's reply (`--companions=1`)",
             uroce.get(("ib_send_lat", 64), {}).get("t_typical_us"), None, rc_ow)
        krow("64 B one-way latency, µs, UC: no ACK frame (ib_send_lat -c UC)",
             uroce.get(("ib_send_lat_uc", 64), {}).get("t_typical_us"), w.one_way_us(64), wh.one_way_us(64))
        krow("64 B message rate, M/s (ib_send_bw)", uroce.get(("ib_send_bw", 64), {}).get("msg_rate_mpps"),
             w.msg_rate_mpps(64), wh.msg_rate_mpps(64), 3)
        krow(f"RDMA WRITE {big} B, MiB/s (ib_write_bw)", uroce.get(("ib_write_bw", big), {}).get("bw_mb_s"),
             w.bw_mib(big), wh.bw_mib(big), 0)
        L.append("")

    L.append("## Latency (perftest t_typical, µs)\n")
    L.append("ib_send_lat and ib_write_lat report half the round trip; ib_read_lat the whole READ.\n")
    L.append("| size B | send_lat | wire one-way | ratio | write_lat | ratio | read_lat | wire READ | ratio |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for s in sizes:
        sl = uroce.get(("ib_send_lat", s), {}).get("t_typical_us")
        wl = uroce.get(("ib_write_lat", s), {}).get("t_typical_us")
        rl = uroce.get(("ib_read_lat", s), {}).get("t_typical_us")
        ow, rw = w.one_way_us(s), w.read_us(s)
        L.append(f"| {s} | {fmt(sl)} | {fmt(ow)} | {fx(ratio(sl, ow))} | {fmt(wl)} | {fx(ratio(wl, ow))} | "
                 f"{fmt(rl)} | {fmt(rw)} | {fx(ratio(rl, rw))} |")
    L.append("")

    L.append("## Bandwidth (perftest BW average, MiB/s; message rate, M/s)\n")
    L.append("Each uroce cell: the median of the rounds, and in () the lowest and highest of them "
             "(perftest `-D`, duration runs).\n")
    L.append("| size B | wire MiB/s | send_bw | ratio | write_bw | ratio | read_bw | ratio | wire M/s | send M/s | ratio |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")

    def spread_of(m):  # "median (lowest-highest)" of a bandwidth figure's metrics
        lo, hi = m.get("bw_mb_s_min"), m.get("bw_mb_s_max")
        text = fmt(m.get("bw_mb_s"), 1)
        return text if lo is None or hi is None else f"{text} ({fmt(lo, 0)}–{fmt(hi, 0)})"

    def spread(prog, s):
        return spread_of(uroce.get((prog, s), {}))

    for s in sizes:
        wb = w.bw_mib(s)
        sb = uroce.get(("ib_send_bw", s), {}).get("bw_mb_s")
        wr = uroce.get(("ib_write_bw", s), {}).get("bw_mb_s")
        rb = uroce.get(("ib_read_bw", s), {}).get("bw_mb_s")
        wm = w.msg_rate_mpps(s)
        sm = uroce.get(("ib_send_bw", s), {}).get("msg_rate_mpps")
        L.append(f"| {s} | {fmt(wb, 1)} | {spread('ib_send_bw', s)} | {fx(ratio(sb, wb))} | "
                 f"{spread('ib_write_bw', s)} | {fx(ratio(wr, wb))} | {spread('ib_read_bw', s)} | "
                 f"{fx(ratio(rb, wb))} | {fmt(wm, 3)} | {fmt(sm, 3)} | {fx(ratio(sm, wm))} |")
    L.append("")

    shapes = costs.get("shape", {})
    if shapes:
        both = Wire(rtt, costs.get("duplex", {}), a.pmtu, a.overhead)
        L.append("Other shapes (issue 43): both directions at once (`-b`, perftest's figure is the sum of the "
                 "two), eight QPs (`-q 8`), UC and UD, against the one-way raw stream at the message's frame "
                 "(UD's carries 8 bytes of DETH more); `-b` against the raw stream both ways at once "
                 "(uroce-wire-limit --duplex: each end's one thread sends its stream and counts the other's, "
                 "the two received rates summed), and beside it against the one-way stream.  "
                 "Issue 43's targets: `-b` ≥ 0.8×, the rest ≥ 0.9×.\n")
        L.append("| program | size B | MiB/s (lowest–highest) | message rate M/s | wire MiB/s | ratio |")
        L.append("|---|---|---|---|---|---|")
        for (p, s_), m in sorted(shapes.items()):
            bw = m.get("bw_mb_s")
            if " -b" in f" {p}":
                L.append(f"| {p} | {s_} | {spread_of(m)} | {fmt(m.get('msg_rate_mpps'), 3)} | "
                         f"{fmt(both.bw_mib(s_), 1)} both ways ({fmt(w.bw_mib(s_), 1)} one way) | "
                         f"{fx(ratio(bw, both.bw_mib(s_)))} ({fx(ratio(bw, w.bw_mib(s_)))}) |")
                continue
            L.append(f"| {p} | {s_} | {spread_of(m)} | {fmt(m.get('msg_rate_mpps'), 3)} | {fmt(w.bw_mib(s_), 1)} | "
                     f"{fx(ratio(bw, w.bw_mib(s_)))} |")
        L.append("")

    stages = [load_stages(p) for p in a.stages]
    stages = [x for x in stages if x]
    if stages:
        ops = []
        for x in stages:
            if x.get("op", "send") not in ops:
                ops.append(x.get("op", "send"))
        L.append("## Where a message's time goes (uroce-stages, ns)\n")
        L.append("The stack's own stage stamps (lib/util/stamps.hpp) over a 64-byte ping-pong between the two "
                 "ends of the veth opened by one process, so both sides' stamps share one clock; medians "
                 "(10th–90th percentile). One thread polls both devices: `poll` includes the rest of the "
                 "receiving engine's iteration (its ACK's transmission).  A WRITE carries an immediate so that "
                 "the receiver's CQE ends its path; a READ's path is its round trip, and its `response` stage "
                 "is the whole way back (the responder's read and build, ICRC, TX, the wire, RX and the "
                 "requester's parse and placement).\n")
        for op in ops:
            runs = [x for x in stages if x.get("op", "send") == op]
            L.append(f"**{op.upper()}**\n")
            L.append("| stage | " + " | ".join(f"{x['progress']} progress" for x in runs) + " |")
            L.append("|---|" + "---|" * len(runs))
            for i, st in enumerate(runs[0]["stages"]):
                cells = []
                for x in runs:
                    e = x["stages"][i] if i < len(x["stages"]) else None
                    cells.append(f"{e['p50_ns']:.0f} ({e['p10_ns']:.0f}–{e['p90_ns']:.0f})" if e else "—")
                L.append(f"| {st['stage']} | " + " | ".join(cells) + " |")
            way = "round trip" if op == "read" else "one way"
            L.append(f"| post to poll ({way}) | " + " | ".join(f"{x['one_way_ns']:.0f}" for x in runs) + " |")
            L.append("")

    if mempoll:
        L.append("## Programs that poll memory (issue 16: progress)\n")
        L.append("The program waits for the peer's WRITE by spinning on memory and never calls the library, "
                 "so only its engine thread delivers the data, on a core it shares with a spinning thread.  "
                 "The average and the 99.9th percentile show the stalls the typical figure hides.  64 B; "
                 "ratios to this run's ib_send_lat 64 B t_typical.\n")
        L.append("| program | typical µs | average µs | 99.9% µs | average / ib_send_lat |")
        L.append("|---|---|---|---|---|")
        sl = uroce.get(("ib_send_lat", 64), {}).get("t_typical_us")
        for key, name in (("ib_write_lat_rc", "ib_write_lat (RC)"), ("ib_write_lat_uc", "ib_write_lat -c UC"),
                          ("qperf_rc_rdma_write_poll_lat", "qperf rc_rdma_write_poll_lat (its average)")):
            m = mempoll.get(key)
            if m is None:
                continue
            avg = m.get("t_avg_us", m.get("avg_us"))
            L.append(f"| {name} | {fmt(m.get('t_typical_us'))} | {fmt(avg)} | {fmt(m.get('t_999_us'))} | "
                     f"{fx(ratio(avg, sl))} |")
        L.append("")

    cpu, heap = costs.get("cpu", {}), costs.get("heap", {})
    mem = costs.get("memory", {}).get(("uroce-qp-scale", 0), {})
    if cpu or heap or mem:
        L.append("## What a message costs: CPU, system calls, heap, memory (issues 16, 43)\n")
    if cpu:
        L.append("Per message at each end, measured around the unmodified program with `perf stat`: each program "
                 "ran with few and with many messages, and the difference is divided by the difference in "
                 "messages, so start-up and connection set-up are left out.  CPU is every thread of the process "
                 "(task-clock), split into user and kernel by the process's rusage; on a veth the kernel part "
                 "of the sending end includes the far end's receive path, which runs inside the sender's "
                 "transmit call.  At full rate a polling thread's spins count too, as they do for the raw "
                 "tool's.  \"tx calls\" are sendmmsg/sendto (one per transmit burst).  The raw tool "
                 "(uroce-wire-limit, same port code, no RDMA) gives the same per frame; \"raw, same frames\" is "
                 "its two ends' CPU per frame times the data frames the message puts on the wire (READ: its "
                 "request and its response; ib_send_lat: one iteration, a frame each way; ACKs not counted).  "
                 "The raw receiver polls at full rate, so its CPU per frame is one core over the frame rate; "
                 "for a message whose frames go both ways (READ, the ping-pong) the raw figure overstates what "
                 "those frames need, and the comparison that holds is the sending end's kernel time per frame "
                 "(the veth's and af_packet's path, the floor on this wire) against the raw tx's.\n")
        raw = {s_: m for (p, s_), m in cpu.items() if p == "raw_stream"}

        def frames_of(prog, size):  # (data frames per message, frame bytes)
            n = 2 if prog in ("ib_read_bw", "ib_send_lat") else -(-size // a.pmtu)
            return n, a.overhead + min(size, a.pmtu)

        L.append("| program | end | CPU ns | user ns | kernel ns | system calls | tx calls | "
                 "instructions (u+k) | cycles (u+k) | raw, same frames, both ends, CPU ns | uroce both ends / raw |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for (p, s_), m in sorted(cpu.items()):
            if p == "raw_stream":
                continue
            n, f = frames_of(p, s_)
            r = raw.get(max(f, 64), {})
            tx, rx = r.get("tx_cpu_ns_per_msg"), r.get("rx_cpu_ns_per_msg")
            rawv = (tx + rx) * n if tx is not None and rx is not None else None
            client, server = m.get("client_cpu_ns_per_msg"), m.get("server_cpu_ns_per_msg")
            both = client + server if client is not None and server is not None else None
            for end in ("client", "server"):
                def g(k, d=0):
                    return fmt(m.get(f"{end}_{k}_per_msg"), d)

                def uk(k):
                    u, kk = m.get(f"{end}_{k}_u_per_msg"), m.get(f"{end}_{k}_k_per_msg")
                    return fmt(u + kk, 0) if u is not None and kk is not None else "not counted"
                first = end == "client"
                L.append(f"| {p + ' ' + str(s_) + ' B' if first else ''} | {end} | {g('cpu_ns')} | {g('user_ns')} | "
                         f"{g('sys_ns')} | {g('syscalls', 3)} | {g('txcalls', 3)} | {uk('instructions')} | "
                         f"{uk('cycles')} | {fmt(rawv, 0) if first else ''} | "
                         f"{fx(ratio(both, rawv)) if first else ''} |")
        if raw:
            L.append("")
            L.append("The raw tool per frame: " + "; ".join(
                f"{f_} B frames: tx {fmt(m.get('tx_cpu_ns_per_msg'), 0)} ns CPU ({fmt(m.get('tx_sys_ns_per_msg'), 0)} "
                f"kernel), rx {fmt(m.get('rx_cpu_ns_per_msg'), 0)} ns ({fmt(m.get('rx_sys_ns_per_msg'), 0)} kernel)"
                for f_, m in sorted(raw.items())) + ".")
        if not any(k.endswith("instructions_u_per_msg") for m in cpu.values() for k in m):
            L.append("")
            L.append("Instructions and cycles: not counted, this machine's perf reports the hardware events "
                     "\"not supported\" (a VM without a virtual PMU); bench/run records them where they are.")
        L.append("")
    if heap:
        L.append("Heap allocations per packet while RC traffic runs between two RNICs on the sim wire "
                 "(bench/rnic_bench.cpp's allocation hook counts every malloc, operator new included): "
                 + ", ".join(f"{p} {s_} B: {fmt(m.get('allocs_per_pkt'), 3)}" for (p, s_), m in sorted(heap.items()))
                 + ".\n")
    floor = costs.get("floor", {})
    if floor:
        L.extend(floor_section(floor))
    if mem:
        L.append(f"Memory: {int(mem.get('qps', 0)):,} RC QPs on one device (sim, in memory) at send and receive "
                 f"depth {int(mem.get('send_depth', 0))}/{int(mem.get('recv_depth', 0))} (perftest's default), "
                 f"connected in pairs through the device's loopback and each used once (bench/qp_scale.cpp): "
                 f"{int(mem.get('bytes_per_qp_created', 0)):,} resident bytes per QP created, "
                 f"{int(mem.get('bytes_per_qp_used', 0)):,} once used; created in {fmt(mem.get('create_ms'), 0)} ms, "
                 f"connected in {fmt(mem.get('connect_ms'), 0)} ms, used in {fmt(mem.get('use_ms'), 0)} ms; "
                 f"{int(mem.get('completions', 0)):,} of {int(mem.get('expected', 0)):,} completions, "
                 f"{int(mem.get('errors', 0))} errors, {int(mem.get('qps_left', 0))} QPs left after destroy.\n")

    if startup:
        L.append("## Start-up (issue 13: usable within 100 ms of the first call)\n")
        L.append("A plain verbs program through the drop-in (bench/startup.cpp) on the veth's af_packet "
                 "port, timed from its first call (`ibv_get_device_list`): median of the runs, ms.\n")
        L.append("| step | ms after the first call | ratio to 100 ms |")
        L.append("|---|---|---|")
        for key, name in (("list_ms", "ibv_get_device_list returned"), ("open_ms", "ibv_open_device returned"),
                          ("usable_ms", "PD, CQ and query_port done (usable)"), ("active_ms", "port ACTIVE")):
            v = startup.get(key)
            L.append(f"| {name} | {fmt(v, 1)} | {fx(ratio(v, 100.0))} |")
        L.append("")

    if daemon:
        L.append("## Through uroced (issue 15: the shared device)\n")
        L.append("The same programs as clients of a daemon on each end of the same veth (`build/tools/uroced` "
                 "with its defaults: asleep at SCHED_FIFO 1 when idle, polling while a client of its own "
                 "scheduling group spins on a CQ; bench/run starts the daemons in its own session, so they poll "
                 "for its programs, where a daemon systemd starts would not), against this run's in-process "
                 "figures above.  Each end then has two spinning threads (the program and its daemon) where "
                 "in-process it has one: on a machine with fewer cores than that they take turns "
                 "(DESIGN.md \"The shared device\").\n")
        L.append("| figure | in-process | through uroced | ratio | target | met |")
        L.append("|---|---|---|---|---|---|")

        def drow(name, prog, size, metric, unit, goal, want_le):
            a_ = uroce.get((prog, size), {}).get(metric)
            b_ = daemon.get((prog, size), {}).get(metric)
            r = ratio(b_, a_)
            met = "—" if r is None else ("yes" if (r <= goal if want_le else r >= goal) else "no")
            L.append(f"| {name} | {fmt(a_)} {unit} | {fmt(b_)} {unit} | {fx(r)} | "
                     f"{'≤' if want_le else '≥'} {goal}× | {met} |")

        drow("ib_send_lat 64 B t_typical", "ib_send_lat", 64, "t_typical_us", "µs", 1.3, True)
        for (p, s_) in sorted(daemon):
            if p == "ib_write_bw":
                drow(f"ib_write_bw {s_} B", p, s_, "bw_mb_s", "MB/s", 0.9, False)
        drow("ib_send_bw 64 B message rate", "ib_send_bw", 64, "msg_rate_mpps", "M/s", 0.9, False)
        L.append("")
        relayed = Wire(host_relay_rc_rtt, {}, a.pmtu, a.overhead).one_way_us(64)
        if rc_ow is not None and relayed is not None:
            r = ratio(relayed, rc_ow)
            L.append("The least a hop through another thread costs on this machine: the raw 64 B message's "
                     "ping-pong in RC's shape (the frames to the host, one frame ahead of each request and "
                     "reply) with a relay thread at each end that owns the port, reached through rings of "
                     "pointers, no copy and no check, both threads yielding when idle "
                     f"(`uroce-wire-limit --relay`): one-way {fmt(relayed)} µs against {fmt(rc_ow)} µs "
                     f"without, **{fx(r)}**.  In-process ib_send_lat is about the plain figure (the "
                     "\"kernel's share\" table above), and every message through uroced crosses such a "
                     "hop at each end, so that ratio is the floor of the first row's on this machine.\n")

    L.append("## Issue 16's targets\n")
    L.append("| target | measured | goal | met |")
    L.append("|---|---|---|---|")

    def target(name, value, goal, want_le):
        met = "—" if value is None else ("yes" if (value <= goal if want_le else value >= goal) else "no")
        L.append(f"| {name} | {fx(value)} | {'≤' if want_le else '≥'} {goal}× | {met} |")

    target("ib_send_lat 64 B / raw one-way",
           ratio(uroce.get(("ib_send_lat", 64), {}).get("t_typical_us"), w.one_way_us(64)), 1.3, True)
    target("ib_write_lat 64 B / ib_send_lat 64 B",
           ratio(uroce.get(("ib_write_lat", 64), {}).get("t_typical_us"),
                 uroce.get(("ib_send_lat", 64), {}).get("t_typical_us")), 1.5, True)
    target("64 B message rate / raw frame rate",
           ratio(uroce.get(("ib_send_bw", 64), {}).get("msg_rate_mpps"), w.msg_rate_mpps(64)), 0.8, False)
    big = max(sizes) if sizes else 0  # the target names 64 KiB; the largest size measured stands for it
    target(f"RDMA WRITE {big} B / raw stream at the path MTU",
           ratio(uroce.get(("ib_write_bw", big), {}).get("bw_mb_s"), w.bw_mib(big)), 0.8, False)

    def target_text(name, measured, goal, met):
        L.append(f"| {name} | {measured} | {goal} | {'—' if met is None else ('yes' if met else 'no')} |")

    allocs = [m.get("allocs_per_pkt") for m in heap.values() if m.get("allocs_per_pkt") is not None]
    target_text("heap allocations per packet (RC, sim wire)", fmt(max(allocs), 3) if allocs else "—", "0",
                (max(allocs) == 0) if allocs else None)
    bw_sys = cpu.get(("ib_send_bw", 64), {})
    others = [bw_sys[f"{e}_syscalls_per_msg"] - bw_sys[f"{e}_txcalls_per_msg"] for e in ("client", "server")
              if f"{e}_syscalls_per_msg" in bw_sys and f"{e}_txcalls_per_msg" in bw_sys]
    target_text("system calls per 64 B message besides the transmit calls (ib_send_bw, busier end)",
                fmt(max(others), 3) if others else "—", "< 1 (none per packet)",
                (max(others) < 1) if others else None)
    if mem:
        done = mem.get("completions") == mem.get("expected") and mem.get("errors") == 0
        target_text(f"{int(mem.get('qps', 0)):,} QPs on one device, each used once",
                    f"{int(mem.get('completions', 0)):,}/{int(mem.get('expected', 0)):,} completions, "
                    f"{int(mem.get('bytes_per_qp_used', 0)):,} B per QP", "all complete; bytes stated", done)
    else:
        target_text("10,000 QPs on one device, each used once", "—", "all complete; bytes stated", None)
    L.append("")
    missing = sorted(f"{p} {s} B" for (p, s), v in uroce.items() if not v)
    if missing:
        L.append("Runs that printed no figure: " + ", ".join(missing) + ".\n")
    have_plots = plot(a.out, sizes, uroce, w)
    if have_plots:
        L.append("Plots: [latency.png](latency.png), [bandwidth.png](bandwidth.png).\n")
    else:
        L.append("No plots: gnuplot is not installed (scripts/setup installs gnuplot-nox).\n")

    L.append("## Runs that ended in an error\n")
    if failed:
        L.append(f"Each figure above is the median of the runs that completed, of {a.rounds}; these did not "
                 "(perftest's exit status non-zero; the run's first error line is in bench/run's output).\n")
        L.append("| where | program | size B | runs failed |")
        L.append("|---|---|---|---|")
        for kind, prog, size, n in sorted(failed):
            where = "through uroced" if kind == "daemon" else "in-process"
            L.append(f"| {where} | {prog} | {size} | {n} of {a.rounds} |")
    else:
        L.append("None: every perftest run completed.")
    L.append("")
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write("\n".join(L))
    return 0


def plot(out, sizes, uroce, w):
    gp = shutil.which("gnuplot")
    if gp is None:
        return False
    dat = os.path.join(tempfile.mkdtemp(prefix="uroce-plot."), "plot.dat")
    with open(dat, "w") as f:
        f.write("# size send_lat write_lat read_lat wire_one_way wire_read send_bw write_bw read_bw wire_bw\n")
        for s in sizes:
            def g(p, m):
                v = uroce.get((p, s), {}).get(m)
                return "NaN" if v is None else f"{v:.4f}"
            def n(v):
                return "NaN" if v is None else f"{v:.4f}"
            f.write(" ".join([str(s), g("ib_send_lat", "t_typical_us"), g("ib_write_lat", "t_typical_us"),
                              g("ib_read_lat", "t_typical_us"), n(w.one_way_us(s)), n(w.read_us(s)),
                              g("ib_send_bw", "bw_mb_s"), g("ib_write_bw", "bw_mb_s"), g("ib_read_bw", "bw_mb_s"),
                              n(w.bw_mib(s))]) + "\n")
    script = f"""
set terminal pngcairo size 900,560 noenhanced
set logscale x 2
set xlabel "message size (bytes)"
set key top left
set grid
set output "{os.path.join(out, 'latency.png')}"
set title "Latency: perftest over uroce and the raw wire (same run)"
set ylabel "microseconds (t_typical)"
set logscale y 10
plot "{dat}" using 1:2 with linespoints title "ib_send_lat", \\
     "" using 1:3 with linespoints title "ib_write_lat", \\
     "" using 1:4 with linespoints title "ib_read_lat", \\
     "" using 1:5 with lines dashtype 2 lw 2 title "wire one-way", \\
     "" using 1:6 with lines dashtype 3 lw 2 title "wire READ round trip"
set output "{os.path.join(out, 'bandwidth.png')}"
set title "Bandwidth: perftest over uroce and the raw wire (same run)"
set ylabel "MiB/s"
unset logscale y
plot "{dat}" using 1:7 with linespoints title "ib_send_bw", \\
     "" using 1:8 with linespoints title "ib_write_bw", \\
     "" using 1:9 with linespoints title "ib_read_bw", \\
     "" using 1:10 with lines dashtype 2 lw 2 title "wire (raw stream payload)"
"""
    r = subprocess.run([gp], input=script, text=True, capture_output=True)
    shutil.rmtree(os.path.dirname(dat), ignore_errors=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
