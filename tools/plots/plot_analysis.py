#!/usr/bin/python3
"""Plots the JSON of `zen analyze TRACE --json OUT` (zen/analysis/trace_analyzer.h).

  /usr/bin/python3 tools/plots/plot_analysis.py ANALYSIS.json OUT_DIR

writes to OUT_DIR (Debian's python3-matplotlib, no display needed):
  densification.png  gamma(k) against k for every tensor, with the full-overlap
                     (gamma = 1) and disjoint (gamma = k) bounds;
  overlap.png        histogram of pairwise overlap ratios, one panel per tensor
                     name (all steps pooled);
  skew_heatmap.png   per tensor name (first step): share of each rank's
                     non-zeros in each of 8 and of n even id ranges;
  imbalance.png      push/pull imbalance (max/mean bytes per server) of range
                     vs hash partitioning, means over steps.
`zen analyze TRACE --plot DIR` runs this script.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def by_base(tensors):
    out = {}
    for t in tensors:
        out.setdefault(t["base"], []).append(t)
    return out


def title_of(a):
    return f"{os.path.basename(a['trace'])}, {a['world_size']} ranks"


def plot_densification(a, groups, path):
    n = a["world_size"]
    k = np.arange(1, n + 1)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    ax.plot(k, k, "k:", lw=1, label="disjoint (γ = k)")
    ax.plot(k, np.ones_like(k), "k--", lw=1, label="full overlap (γ = 1)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (base, ts) in enumerate(groups.items()):
        c = colors[i % len(colors)]
        for j, t in enumerate(ts):
            d = 100 * t["mean_density"]
            label = f"{base}: d = {d:.2f}%, γ({n}) = {t['gamma'][-1]:.2f}" if j == 0 else None
            ax.plot(k, t["gamma"], "-o", color=c, ms=3, lw=1.5, alpha=1 if j == 0 else 0.45,
                    label=label)
    ax.set_xlabel("ranks summed, k")
    ax.set_ylabel("densification γ(k) = density of k-rank sum / per-rank density")
    ax.set_title(f"Densification ({title_of(a)}; lighter lines: later steps)", fontsize=10)
    ax.set_xlim(1, n)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_overlap(a, groups, path):
    bins = a["overlap_bins"]
    edges = np.linspace(0, 1, bins + 1)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (base, ts) in zip(axes[0], groups.items()):
        counts = np.sum([t["overlap"]["histogram"] for t in ts], axis=0)
        total = max(1, counts.sum())
        ax.bar(edges[:-1], 100 * counts / total, width=1 / bins, align="edge",
               edgecolor="black", lw=0.5)
        mean = np.mean([t["overlap"]["mean"] for t in ts])
        ax.axvline(mean, color="red", ls="--", lw=1, label=f"mean {mean:.2f}")
        ax.set_xlim(0, 1)
        ax.set_xlabel("overlap ratio |Ii ∩ Ij| / min(|Ii|, |Ij|)")
        ax.set_ylabel(f"rank pairs (%, of {int(counts.sum())})")
        ax.set_title(f"{base} ({len(ts)} steps)", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Pairwise overlap ({title_of(a)})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def heat(ax, counts, title, annotate):
    counts = np.asarray(counts, dtype=float)
    share = 100 * counts / np.maximum(1, counts.sum(axis=1, keepdims=True))
    im = ax.imshow(share, aspect="auto", cmap="viridis", vmin=0, vmax=100, interpolation="nearest")
    ax.set_xlabel(f"id range (index space split into {counts.shape[1]} even ranges)")
    ax.set_ylabel("rank")
    ax.set_yticks(range(counts.shape[0]))
    ax.set_title(title, fontsize=9)
    if annotate:
        for r in range(share.shape[0]):
            for j in range(share.shape[1]):
                ax.text(j, r, f"{share[r, j]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if share[r, j] < 60 else "black")
    return im


def plot_skew(a, groups, path):
    n = a["world_size"]
    cols = 1 if n == 8 else 2  # with 8 ranks both splits are the same
    fig, axes = plt.subplots(len(groups), cols, figsize=(6.5 * cols + 1, 3.4 * len(groups) + 0.6),
                             squeeze=False, layout="constrained")
    im = None
    for row, (base, ts) in zip(axes, groups.items()):
        t = ts[0]
        sk = t["skew"]
        im = heat(row[0], sk["counts_8"],
                  f"{t['name']} [{t['rows']} x {t['width']}]\n"
                  f"{100 * sk['first_of_8_share']:.1f}% of non-zeros in range 0 of 8"
                  + (f"; skewness mean {sk['mean_skewness']:.2f}" if cols == 1 else ""),
                  annotate=True)
        if cols == 2:
            heat(row[1], sk["counts_n"],
                 f"{t['name']}: over {n} ranges\nskewness (max range density / density) "
                 f"mean {sk['mean_skewness']:.2f}", annotate=n <= 16)
    cbar = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.9)
    cbar.set_label("% of the rank's non-zeros")
    fig.suptitle(f"Where the non-zeros are ({title_of(a)}; first step)", fontsize=11)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_imbalance(a, summary, path):
    names = [s["base"] for s in summary]
    series = [("range push", "range_push"), ("range pull", "range_pull"),
              ("hash push", "hash_push"), ("hash pull", "hash_pull")]
    x = np.arange(len(names))
    w = 0.2
    fig, ax = plt.subplots(figsize=(max(6, 2.5 * len(names)), 4))
    for i, (label, key) in enumerate(series):
        vals = [s[key] for s in summary]
        bars = ax.bar(x + (i - 1.5) * w, vals, w, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1, color="black", lw=0.8)
    ax.set_xticks(x, names)
    ax.set_ylabel("imbalance: max / mean bytes per server")
    ax.set_title(f"Partition imbalance, {a['world_size']} servers ({title_of(a)})", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        a = json.load(f)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    groups = by_base(a["tensors"])
    if not groups:
        sys.exit("plot_analysis.py: the analysis holds no tensors")
    plots = {"densification.png": lambda p: plot_densification(a, groups, p),
             "overlap.png": lambda p: plot_overlap(a, groups, p),
             "skew_heatmap.png": lambda p: plot_skew(a, groups, p),
             "imbalance.png": lambda p: plot_imbalance(a, a["summary"], p)}
    for name, plot in plots.items():
        plot(os.path.join(out, name))
        print(f"wrote {os.path.join(out, name)}")


if __name__ == "__main__":
    main()
