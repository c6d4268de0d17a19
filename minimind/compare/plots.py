"""Figures of a `Comparison` (matplotlib, Agg): curves with a band over seeds, the final
objective with error bars, throughput against the objective, and MoE expert load.

Only the runs in the statistics (finished, with the objective) are drawn.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

from minimind.compare.render import split_shared_key  # noqa: E402
from minimind.compare.table import Comparison, curve_key  # noqa: E402

X_AXES = (("step", "step"), ("train/tokens", "tokens seen"), ("time/elapsed_s", "wall-clock (s)"))
"""The x axes of the curves: optimizer step, tokens seen and training time, each as logged."""


def _groups(comparison: Comparison) -> list[tuple[str, str, list[str]]]:
    """(group, display label, finished run ids) in table order."""
    groups = list(comparison.table["variant"])
    _, labels = split_shared_key(groups)
    finished = comparison.runs[~comparison.runs["run_id"].isin(comparison.problems["run_id"])]
    return [
        (g, label, list(finished.loc[finished["group"] == g, "run_id"]))
        for g, label in zip(groups, labels, strict=True)
    ]


def _colors(n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def seed_band(comparison: Comparison, run_ids: list[str], key: str) -> pd.DataFrame:
    """Mean and std over runs of `key` at each step: columns `mean`, `std`, `n`, index step.

    Steps where only some seeds logged a point average over those that did; the index is
    sorted, also when seeds logged different steps (a time limit ends them apart).
    """
    series = [comparison.runset.history(r, key) for r in run_ids]
    series = [s for s in series if len(s)]
    if not series:
        return pd.DataFrame(columns=["mean", "std", "n"])
    wide = pd.concat(series, axis=1).sort_index()
    return pd.DataFrame(
        {"mean": wide.mean(axis=1), "std": wide.std(axis=1, ddof=1), "n": wide.count(axis=1)}
    )


def draw_band(
    ax: Axes, x: np.ndarray, band: pd.DataFrame, color, label: str | None, lw: float | None = None
) -> None:
    """A group's mean line over `x` and its ± one-sd band (`seed_band`'s `mean` and `std`)."""
    mean, std = band["mean"].to_numpy(), band["std"].fillna(0.0).to_numpy()
    ax.plot(x, mean, color=color, label=label, lw=lw)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


def _step_to(comparison: Comparison, run_ids: list[str], key: str, steps: np.ndarray) -> np.ndarray:
    """Map steps to the mean over runs of a cumulative metric (tokens, seconds); step 0 is 0."""
    band = seed_band(comparison, run_ids, key)
    if band.empty:
        return np.full(len(steps), np.nan)
    xp = np.concatenate([[0.0], band.index.to_numpy(dtype=float)])
    fp = np.concatenate([[0.0], band["mean"].to_numpy(dtype=float)])
    return np.interp(steps, xp, fp)


def curves_figure(comparison: Comparison, key: str) -> Figure | None:
    """`key` (mean ± std over seeds) per group against step, tokens and wall-clock time."""
    groups = _groups(comparison)
    bands = [(label, ids, seed_band(comparison, ids, key)) for _, label, ids in groups]
    if all(b.empty for _, _, b in bands):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True, layout="constrained")
    for (label, ids, band), color in zip(bands, _colors(len(bands)), strict=True):
        if band.empty:
            continue
        steps = band.index.to_numpy(dtype=float)
        for ax, (x_key, _) in zip(axes, X_AXES, strict=True):
            x = steps if x_key == "step" else _step_to(comparison, ids, x_key, steps)
            if np.isnan(x).all():
                continue
            draw_band(ax, x, band, color, f"{label} (n={len(ids)})", lw=1.6)
    for ax, (x_key, x_label) in zip(axes, X_AXES, strict=True):
        ax.set_xlabel(x_label)
        if x_key != "step":  # 100k, 1.5M: plain tick labels of token counts run together
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        if not ax.lines:
            ax.text(
                0.5, 0.5, f"{x_key} not logged", ha="center", va="center", transform=ax.transAxes
            )
    axes[0].set_ylabel(key)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{key}: mean ± std over seeds")
    return fig


def final_bar_figure(comparison: Comparison) -> Figure | None:
    """Final objective per group: a diamond at the mean with a ± std interval, dots = seeds.

    Points, not bars: a bar's length reads as the value, so it would need an axis from zero,
    which hides differences that are small next to the value; an interval needs no zero."""
    m = comparison.metric
    groups = [(g, label, ids) for g, label, ids in _groups(comparison) if ids]
    if not groups:
        return None
    finals = comparison.runs.set_index("run_id")[m]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(groups) + 2), 4.5), layout="constrained")
    colors = _colors(len(groups))
    values = [finals.loc[ids].to_numpy(dtype=float) for _, _, ids in groups]
    means = [v.mean() for v in values]
    stds = [v.std(ddof=1) if len(v) > 1 else 0.0 for v in values]
    x = np.arange(len(groups))
    for i, (g, _, _) in enumerate(groups):
        baseline = g == comparison.baseline
        ax.errorbar(
            x[i], means[i], yerr=stds[i], fmt="D", ms=9, capsize=6, color=colors[i],
            mfc="white" if baseline else colors[i], mew=2, zorder=2,
        )  # fmt: skip
    jitter = np.random.default_rng(0)
    for i, v in enumerate(values):
        ax.scatter(i + jitter.uniform(-0.15, 0.15, len(v)), v, color="black", s=14, zorder=3)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_xticks(x, [label for _, label, _ in groups], rotation=20, ha="right")
    ax.set_ylabel(f"final {m}")
    ax.set_title(
        f"final {m}: mean ± std over seeds\n(dots: seeds; hollow: baseline)", fontsize="medium"
    )
    ax.grid(axis="y", alpha=0.3)
    return fig


def pareto_figure(comparison: Comparison) -> Figure | None:
    """Median throughput against the objective, one point per group, the Pareto front joined."""
    m = comparison.metric
    t = comparison.table.dropna(subset=["perf/tokens_per_s_median", f"{m}_mean"])
    if t.empty:
        return None
    _, labels = split_shared_key(list(comparison.table["variant"]))
    label_of = dict(zip(comparison.table["variant"], labels, strict=True))
    colors = dict(zip(comparison.table["variant"], _colors(len(comparison.table)), strict=True))
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    for _, r in t.iterrows():
        ax.errorbar(
            r["perf/tokens_per_s_median"], r[f"{m}_mean"], yerr=np.nan_to_num(r[f"{m}_std"]),
            fmt="o", color=colors[r["variant"]], capsize=4, ms=8, label=label_of[r["variant"]],
        )  # fmt: skip
    front = pareto_front(
        t["perf/tokens_per_s_median"].to_numpy(), t[f"{m}_mean"].to_numpy(), comparison.maximize
    )
    ax.plot(
        t["perf/tokens_per_s_median"].to_numpy()[front], t[f"{m}_mean"].to_numpy()[front],
        "--o", color="gray", lw=1, ms=16, mfc="none", label="Pareto front",
    )  # fmt: skip
    ax.set_xlabel("tokens/s (median over the run)")
    ax.set_ylabel(f"final {m} (mean ± std)")
    better = "higher" if comparison.maximize else "lower"
    ax.set_title(f"throughput vs {m} (right and {better} is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def pareto_front(throughput: np.ndarray, objective: np.ndarray, maximize: bool) -> np.ndarray:
    """Indices of the points no other point beats on both axes, sorted by throughput.

    throughput: [n] (higher is better); objective: [n] (lower is better unless `maximize`).
    """
    score = -objective if maximize else objective
    order = np.argsort(-throughput, kind="stable")
    front, best = [], np.inf
    for i in order:  # from the fastest down: keep a point if it beats every faster one
        if score[i] < best:
            front.append(i)
            best = score[i]
    return np.array(sorted(front, key=lambda i: throughput[i]), dtype=int)


def moe_load_figure(comparison: Comparison) -> Figure | None:
    """Coefficient of variation of expert load over steps, for groups that logged it."""
    groups = [
        (label, band)
        for _, label, ids in _groups(comparison)
        if not (band := seed_band(comparison, ids, "moe/load_cv")).empty
    ]
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    for (label, band), color in zip(groups, _colors(len(groups)), strict=True):
        draw_band(ax, band.index.to_numpy(dtype=float), band, color, label)
    ax.set_xlabel("step")
    ax.set_ylabel("moe/load_cv (0 = perfectly balanced)")
    ax.set_title("MoE expert load imbalance: mean ± std over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def draw_all(comparison: Comparison) -> dict[str, Figure]:
    """Every figure that the data allows, by file stem (`curves_val_bpb`, `final`, ...), in
    the order a report shows them."""
    # An exact val/* metric is logged once; its curve is the periodic estimate (`curve_key`).
    keys = {
        k: curve_key(comparison.runset, k) for k in ["train/loss", "val/bpb", comparison.metric]
    }
    comparison.runset.fetch_histories([*keys.values(), *(k for k, _ in X_AXES[1:]), "moe/load_cv"])
    figures = {
        **{f"curves_{_stem(key)}": curves_figure(comparison, curve) for key, curve in keys.items()},
        "final": final_bar_figure(comparison),
        "pareto": pareto_figure(comparison),
        "moe_load": moe_load_figure(comparison),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}


def _stem(key: str) -> str:
    return key.replace("/", "_")
