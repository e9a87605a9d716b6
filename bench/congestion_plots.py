#!/usr/bin/env python3
"""Plots of the lossy and congested benches (issue 42), through gnuplot.

    congestion_plots.py lossy DIR    DIR/lossy.csv -> DIR/lossy.png
    congestion_plots.py incast DIR   DIR/incast.csv (+ incast-timeline.csv) -> DIR/incast.png

lossy.png: each stack's goodput as a share of its own lossless figure,
against the frame loss rate (bench/lossy/run's columns: uroce go-back-N,
uroce selective, the kernel's TCP).

incast.png: per cc mode, each flow's goodput second by second; under it,
from the timeline the bench samples every quarter second, the congested
port's queue (KB) and the CNPs the receivers sent per second.

Exit 0 with the plot written, 1 when the CSV is missing or empty, 3 when
gnuplot is not installed (scripts/setup installs gnuplot-nox): the bench
then says there is no plot, and its figures stand without it.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

NO_GNUPLOT = 3


def gnuplot(script):
    gp = shutil.which("gnuplot")
    if gp is None:
        return NO_GNUPLOT
    r = subprocess.run([gp], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        return 1
    return 0


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def lossy(out):
    data = rows(os.path.join(out, "lossy.csv"))
    if not data:
        sys.stderr.write(f"congestion_plots: no rows in {out}/lossy.csv\n")
        return 1
    by_stack = defaultdict(dict)
    for r in data:
        by_stack[r["stack"]][float(r["loss_pct"])] = float(r["mb_per_s"])
    tmp = tempfile.mkdtemp(prefix="uroce-plot.")
    plots = []
    for stack, points in sorted(by_stack.items()):
        base = points.get(0.0)
        if not base:
            continue  # no lossless figure: no share to draw
        dat = os.path.join(tmp, f"{stack}.dat")
        with open(dat, "w") as f:
            for loss in sorted(points):
                f.write(f"{loss} {points[loss] / base:.4f}\n")
        plots.append(f'"{dat}" using 1:2 with linespoints lw 2 title "{stack}"')
    if not plots:
        sys.stderr.write("congestion_plots: no stack has a lossless figure\n")
        return 1
    script = f"""
set terminal pngcairo size 900,560 noenhanced
set output "{os.path.join(out, 'lossy.png')}"
set title "Goodput against random frame loss, each stack as a share of its own lossless figure"
set xlabel "frame loss (%)"
set ylabel "share of lossless goodput"
set yrange [0:1.15]
set key bottom left
set grid
plot {", ".join(plots)}
"""
    rc = gnuplot(script)
    shutil.rmtree(tmp, ignore_errors=True)
    return rc


def incast(out):
    data = rows(os.path.join(out, "incast.csv"))
    if not data:
        sys.stderr.write(f"congestion_plots: no rows in {out}/incast.csv\n")
        return 1
    timeline = rows(os.path.join(out, "incast-timeline.csv"))
    modes = []
    for r in data:
        if r["cc"] not in modes:
            modes.append(r["cc"])
    tmp = tempfile.mkdtemp(prefix="uroce-plot.")
    panels = []
    for m in modes:
        dat = os.path.join(tmp, f"flows-{m}.dat")
        with open(dat, "w") as f:
            for r in data:
                if r["cc"] == m:
                    f.write(f"{r['second']} {r['flow1_mb_s']} {r['flow2_mb_s']}\n")
        panels.append(f"""
set title "cc {m}: goodput per flow"
set xlabel "second"
set ylabel "MB/s"
set yrange [0:*]
plot "{dat}" using 1:2 with linespoints lw 2 title "flow 1", "" using 1:3 with linespoints lw 2 title "flow 2"
""")
    have_timeline = bool(timeline)
    if have_timeline:
        for m in modes:
            dat = os.path.join(tmp, f"queue-{m}.dat")
            cnp = os.path.join(tmp, f"cnps-{m}.dat")
            with open(dat, "w") as f, open(cnp, "w") as g:
                for r in timeline:
                    if r["cc"] != m:
                        continue
                    f.write(f"{r['t_s']} {int(r['queue_bytes']) / 1000:.1f}\n")
                    t = float(r["t_s"])
                    if t == int(t):  # the CNPs of the second that ended at t, drawn over it
                        g.write(f"{t - 1:g} {r['cnps_per_s']}\n")
            panels.append(f"""
set title "cc {m}: the port's queue and the CNPs sent"
set xlabel "seconds since the senders started"
set ylabel "queue (KB)"
set y2label "CNPs per second"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot "{dat}" using 1:2 with lines lw 2 title "queue" axes x1y1, "{cnp}" using 1:2 with steps lw 2 title "CNPs/s" axes x1y2
unset y2tics
unset y2label
set ytics mirror
""")
    rows_n = 2 if have_timeline else 1
    script = f"""
set terminal pngcairo size {420 * len(modes)},{360 * rows_n} noenhanced
set output "{os.path.join(out, 'incast.png')}"
set grid
set key bottom right
set multiplot layout {rows_n},{len(modes)}
{"".join(panels)}
unset multiplot
"""
    rc = gnuplot(script)
    shutil.rmtree(tmp, ignore_errors=True)
    return rc


def main(argv):
    if len(argv) != 3 or argv[1] not in ("lossy", "incast"):
        sys.stderr.write(__doc__)
        return 2
    return lossy(argv[2]) if argv[1] == "lossy" else incast(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
