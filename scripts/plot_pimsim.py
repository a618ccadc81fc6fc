#!/usr/bin/env python3
"""Plot an `aqpim pimsim --plot FILE` (or --json) report: time per phase and energy by component
for every simulated (workload, placement), and the capacity view.

usage: /usr/bin/python3 scripts/plot_pimsim.py REPORT.json [OUT.png]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + ".png"
    with open(path) as f:
        rep = json.load(f)
    runs = [r for r in rep["runs"] if "does_not_fit" not in r]
    if not runs:
        sys.exit(f"{path}: no simulated run to plot")
    labels = [f"{r['workload']}\n{r['placement']}" for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))

    phases = sorted({p for r in runs for p in r["phases"]})
    bottom = [0.0] * len(runs)
    for p in phases:
        vals = [r["phases"].get(p, 0) / r["cycles"] * r["seconds"] * 1e6 for r in runs]
        axes[0].bar(labels, vals, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[0].set_ylabel("time per decode step (us)")
    axes[0].set_title("attention time by phase (busiest channel)")
    axes[0].legend(fontsize=8)

    parts = ["activate_j", "read_j", "compute_j", "buffer_j", "io_j", "refresh_j", "background_j"]
    bottom = [0.0] * len(runs)
    for p in parts:
        vals = [r["energy"][p] * 1e3 for r in runs]
        axes[1].bar(labels, vals, bottom=bottom, label=p[:-2])
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[1].set_ylabel("energy per decode step (mJ)")
    axes[1].set_title("energy by component (assumed per-event energies)")
    axes[1].legend(fontsize=8)

    cap = rep["capacity"]
    axes[2].bar(["f16", "PQ"], [cap["f16_batch"], cap["pq_batch"]], color=["tab:gray", "tab:green"])
    axes[2].set_ylabel(f"sequences of {rep['shape']['context']} tokens that fit")
    axes[2].set_title(f"capacity wall: {cap['pim_bytes'] / 1e9:.1f} GB of PIM "
                      f"(PQ {cap['pq_bits_per_element']:.2f} bits/element)")
    fig.suptitle(f"aqpim pimsim: {rep['model']} on {rep['dram']} x {rep['shape']['devices']}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
