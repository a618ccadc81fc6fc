#!/usr/bin/env python3
"""Plot an `aqpim eval --json` report: quality vs bits/element, one labelled point per scheme.

    python3 scripts/plot_eval.py REPORT.json OUT.png|OUT.svg

Left panel: perplexity change against the f16 reference (|dPPL| in %), right panel: mean
KL(p_f16 || p_scheme) in nats, both on a log scale against bits/element. The reference and any scheme
that equals it (0 on a log axis) sit on the bottom edge as hollow markers; a negative dPPL is drawn
hollow too (its magnitude is plotted). `aqpim eval --plot FILE` runs this script (docs/eval.md).
"""

import json
import sys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    report_path, out = argv[1], argv[2]
    if not out.lower().endswith((".png", ".svg")):
        sys.stderr.write(f"plot_eval.py: {out}: the file name must end in .png or .svg\n")
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("plot_eval.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib)\n")
        return 1
    with open(report_path) as f:
        report = json.load(f)
    schemes = report["schemes"]
    if not schemes:
        sys.stderr.write(f"plot_eval.py: {report_path}: no schemes\n")
        return 1

    panels = [
        ("delta_ppl_pct", "|Δ perplexity| vs f16 (%)", lambda s: abs(s["delta_ppl_pct"]), lambda s: s["delta_ppl_pct"] < 0),
        ("mean_kl", "mean KL(p_f16 ‖ p_scheme) (nats)", lambda s: s["mean_kl"], lambda s: False),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, (key, label, value, negative) in zip(axes, panels):
        values = [value(s) for s in schemes]
        positive = [v for v in values if v > 0]
        # Where a zero goes on the log axis: a decade under the smallest positive value.
        floor = min(positive) / 10 if positive else 1e-6
        for s, v in zip(schemes, values):
            x = s.get("peak_bits_per_element") or s["bits_per_element"]  # peak: the bytes the context needs
            zero = v <= 0
            y = floor if zero else v
            hollow = zero or negative(s)
            ax.scatter([x], [y], s=40, facecolors="none" if hollow else "C0", edgecolors="C3" if s["reference"] else "C0",
                       zorder=3)
            name = s["spec"] + (" (ref)" if s["reference"] else "") + (" = 0" if zero else "")
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_yscale("log")
        ax.set_xlabel("bits / element, peak on the way to the context (all overheads counted)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    title = report.get("model_name") or report.get("model", "")
    fig.suptitle(f"{title}: {report.get('file', '')}, {report['n_chunks']} chunks of {report['n_ctx']} tokens")
    fig.tight_layout()
    fig.savefig(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
