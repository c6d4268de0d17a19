"""Figures of the training probes (`probe/*`, minimind/training/probes) of a `Comparison`, per group with
a band over seeds: the maximum attention logit per layer over training, the residual stream's
RMS per layer at the end, and the spike scores of the loss and gradient norm. A comparison
whose runs logged no probes has none of these figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from minimind.compare.plots import _colors, _groups, draw_band, seed_band
from minimind.compare.table import Comparison

FIGURE_CAPTIONS = {
    "probe_attn_max_logit": "Maximum pre-softmax attention logit of each layer over training "
    "(sampled queries of a fixed batch; mean ± std over seeds).",
    "probe_resid_rms": "RMS of the residual stream after each block at the last probed step "
    "(mean ± std over seeds).",
    "probe_spike": "Spike scores: the largest z-score of the loss and of the gradient norm "
    "against their trailing window, per log window; the dashed line is the spike threshold.",
}


def _layer_keys(comparison: Comparison, probe: str) -> list[str]:
    """`probe/<probe>/layer<i>` keys the runs logged, by layer."""
    prefix = f"metrics.probe/{probe}/layer"
    layers = [
        c.removeprefix(prefix) for c in comparison.runset.runs.columns if c.startswith(prefix)
    ]
    return [f"probe/{probe}/layer{i}" for i in sorted(int(n) for n in layers if n.isdigit())]


def _per_key_figure(comparison: Comparison, keys: list[str], titles: list[str]) -> Figure | None:
    """One panel per key, the groups' seed bands against step in each."""
    if not keys:
        return None
    groups = _groups(comparison)
    fig = Figure(figsize=(4.2 * len(keys), 3.8), layout="constrained")
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    for ax, key, title in zip(axes, keys, titles, strict=True):
        for (_, label, ids), color in zip(groups, _colors(len(groups)), strict=True):
            band = seed_band(comparison, ids, key)
            if not band.empty:
                x = band.index.to_numpy(dtype=float)
                draw_band(ax, x, band, color, f"{label} (n={len(ids)})", lw=1.4)
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    return fig


def attention_logit_figure(comparison: Comparison) -> Figure | None:
    keys = _layer_keys(comparison, "attn_max_logit")
    fig = _per_key_figure(comparison, keys, [k.rsplit("/", 1)[1] for k in keys])
    if fig is not None:
        fig.suptitle("probe/attn_max_logit: maximum attention logit per layer")
    return fig


def residual_rms_figure(comparison: Comparison) -> Figure | None:
    """The last probed value of each layer's residual RMS: x = layer, one line per group."""
    keys = _layer_keys(comparison, "resid_rms")
    if not keys:
        return None
    groups = _groups(comparison)
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    layers = np.arange(len(keys))
    for (_, label, ids), color in zip(groups, _colors(len(groups)), strict=True):
        finals = []
        for key in keys:
            series = [comparison.runset.history(r, key) for r in ids]
            finals.append([s.iloc[-1] for s in series if len(s)])
        if not all(finals):
            continue
        mean = np.array([np.mean(f) for f in finals])
        std = np.array([np.std(f, ddof=1) if len(f) > 1 else 0.0 for f in finals])
        ax.errorbar(layers, mean, yerr=std, color=color, marker="o", capsize=3, label=label)
    ax.set_xticks(layers, [f"layer {i}" for i in layers])
    ax.set_yscale("log")
    ax.set_ylabel("probe/resid_rms at the last probed step")
    ax.set_title("Residual stream RMS after each block, at the end")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def spike_figure(comparison: Comparison, sigma: float | None) -> Figure | None:
    keys = ["probe/spike/loss", "probe/spike/grad_norm"]
    if not all(f"metrics.{k}" in comparison.runset.runs.columns for k in keys):
        return None
    fig = _per_key_figure(comparison, keys, ["loss", "gradient norm"])
    if fig is not None:
        for ax in fig.axes:
            if sigma is not None:
                ax.axhline(sigma, color="k", ls="--", lw=1)
            ax.set_ylabel("z-score")
        fig.suptitle("probe/spike: largest z-score per log window")
    return fig


def probe_figures(comparison: Comparison) -> dict[str, Figure]:
    """The probe figures the runs allow, by file stem (keys of FIGURE_CAPTIONS)."""
    runs = comparison.runset.runs
    sigma_column = runs.get("params.train.spike.sigma", pd.Series(dtype=object)).dropna()
    sigma = float(sigma_column.iloc[0]) if len(sigma_column) else None
    figures = {
        "probe_attn_max_logit": attention_logit_figure(comparison),
        "probe_resid_rms": residual_rms_figure(comparison),
        "probe_spike": spike_figure(comparison, sigma),
    }
    return {stem: fig for stem, fig in figures.items() if fig is not None}
