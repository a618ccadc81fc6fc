#!/usr/bin/env python3
"""Draw an `aqpim roofline --json` report (what `aqpim roofline --plot FILE` runs).

    python3 scripts/plot_roofline.py REPORT.json OUT.png|OUT.svg|OUT.pdf

Roofline panel: the device's memory and compute roofs (with the efficiency factors applied) and
every operating point of the report's tables (phases, batch sizes, quantization x KV schemes) at
min(compute roof, intensity x bandwidth). KV panel (with --table context): KV bytes of the batch
against context, with the memory left after the weights, so the largest context that fits is
where the curve crosses the line.
"""

import json
import sys


def label_of(table_name, row):
    if table_name == "batch":
        return f"b={row['batch']}"
    if table_name == "quant":
        return f"{row['weights']}/{row['kv'].split(':')[0]}"
    if table_name == "roofline":
        return row["phase"]
    if table_name == "devices":
        return row["device"]
    return None


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    report_path, out = argv[1], argv[2]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("plot_roofline.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib)\n")
        return 1
    with open(report_path) as f:
        report = json.load(f)
    tables = report.get("tables", {})
    bw = report.get("peak_bandwidth_Bps")
    peak = report.get("peak_compute_FLOPs")
    points = []
    for name, t in tables.items():
        for row in t["rows"]:
            lab = label_of(name, row)
            if lab is not None and "intensity" in row and row["intensity"] > 0:
                points.append((name, lab, row["intensity"]))
    has_kv = "context" in tables
    panels = (1 if points and bw else 0) + (1 if has_kv else 0)
    if panels == 0:
        sys.stderr.write(f"plot_roofline.py: {report_path}: nothing to draw (use --table summary, batch, quant, context or devices)\n")
        return 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 5), squeeze=False)
    ax_i = 0
    if points and bw:
        ax = axes[0][ax_i]
        ax_i += 1
        xs = [p[2] for p in points]
        lo, hi = min(xs + [peak / bw]) / 4, max(xs + [peak / bw]) * 4
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.loglog(grid, [min(peak, x * bw) / 1e12 for x in grid], "k-", lw=2, label="roof (peak x efficiency)")
        ax.axvline(peak / bw, color="gray", ls=":", lw=1)
        markers = {"batch": "o", "quant": "s", "roofline": "^", "devices": "D"}
        for name in sorted({p[0] for p in points}):
            sel = [p for p in points if p[0] == name]
            ys = [min(peak, p[2] * bw) / 1e12 for p in sel]
            ax.scatter([p[2] for p in sel], ys, marker=markers.get(name, "o"), label=name, zorder=3)
            for p, y in zip(sel, ys):
                ax.annotate(p[1], (p[2], y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("attainable TFLOP/s")
        ax.set_title(report.get("device", "").split(":")[0] + ": " + report.get("model", "").split(" (")[0])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if has_kv:
        ax = axes[0][ax_i]
        rows = tables["context"]["rows"]
        ctx = [r["context"] for r in rows]
        ax.loglog(ctx, [r["kv_GB_batch"] for r in rows], "o-", label="KV of the batch")
        free = (report["capacity_bytes"] - report["weight_bytes_per_device"]) / 1e9
        if free > 0:
            ax.axhline(free, color="r", ls="--", label=f"memory after weights ({free:.1f} GB)")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("GB")
        ax.set_title("KV cache growth")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
