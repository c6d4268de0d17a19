"""An arm's lr sensitivity (Wortsman et al. 2023: judge an intervention by how its loss moves
across learning rates, not at one lr), read from runs that include an lr grid for it: an lr
sweep's trials, a `sensitivity:` grid, or a spec whose variants set `train.optimizer.lr`.

Runs belong to one arm when their resolved configs agree but for the lr and the seed (the
signature `compare.table` pools by, the lr left out). An arm with runs at 3 or more lrs, each
run on every seed of the grid, has the sensitivity `stats.agreement.lr_sensitivity` per seed:
the mean over the grid of min(final loss, initial loss) minus the best final loss, in nats
(`val/loss`, whose initial value is ln(vocabulary)); a run that diverged (a non-finite loss)
counts at the initial loss. Its mean over seeds carries a t interval (`stats.scaling.t_estimate`).
Lrs not run on every seed are left out of the grid and named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from minimind.compare.table import (
    UNPOOLED_PARAMS,
    UNPOOLED_PREFIXES,
    config_signature,
    numeric_param,
)
from minimind.foundations.document import Block, Heading, Paragraph, Table
from minimind.foundations.document import Figure as FigureBlock
from minimind.record import FAILURE_REASON_TAG
from minimind.stats.agreement import capped_losses, lr_sensitivity
from minimind.stats.scaling import Estimate, t_estimate

LR_PARAM = "train.optimizer.lr"
LR_LABELS = ("lr", "optimizer.lr", LR_PARAM)
"""How a variant's name may write the lr's assignment (`spec.naming`: the key's shortest suffix
no other key of the spec ends with)."""
LOSS = "val/loss"
MIN_LRS = 3
"""The fewest lrs a grid needs: with 2, the sensitivity is half the gap between two points."""

FIGURE_CAPTION = (
    "Each arm's final validation loss (nats) against the lr, the mean over seeds with each "
    "seed's runs as points; a diverged run is drawn at the initial loss, ln(vocabulary), as the "
    "sensitivity counts it."
)


@dataclass(frozen=True)
class LrSensitivity:
    """One arm's lr grid: `final` [seeds, lrs] (inf where a run diverged), its `lrs` and
    `seeds`, the `initial` loss, the sensitivity per seed [seeds] and its mean with a t
    interval; `left_out`, the arm's lrs not run on every seed."""

    arm: str
    lrs: list[float]
    seeds: list[int]
    final: np.ndarray
    initial: float
    per_seed: np.ndarray
    estimate: Estimate
    left_out: list[float]
    level: float = 0.95
    """The level of `estimate`'s interval."""

    @property
    def capped(self) -> np.ndarray:
        """[seeds, lrs]: the final losses the sensitivity averages (`capped_losses`)."""
        return capped_losses(self.final, self.initial)


def lr_sensitivities(
    runs: pd.DataFrame, level: float = 0.95, lr_param: str = LR_PARAM, by: str | None = None
) -> list[LrSensitivity]:
    """Every arm of `runs` (a runs table: params, tags and metrics as columns, with `seed`,
    `variant` and `status`) with an lr grid (module docstring), in the order of their first
    run; the lr is the param `lr_param`. With `by`, an arm is the runs sharing that param's
    value, and its loss at an lr and seed the best over its runs there (a profile over the
    other params searched beside the lr, such as a warm-up)."""
    column = f"params.{lr_param}"
    if runs.empty or column not in runs.columns:
        return []
    if by is not None and f"params.{by}" not in runs.columns:
        return []
    runs = runs.sort_values("start_time", kind="stable")
    lr = numeric_param(runs, lr_param)
    if by is None:
        arm_of = config_signature(runs.drop(columns=[column]))
        labels = _labels(runs, arm_of, lr_param)
    else:
        arm_of = runs[f"params.{by}"].astype(str)
        labels = {value: f"{by}={value}" for value in arm_of}
    out = []
    for arm in dict.fromkeys(arm_of):
        mine = runs[arm_of == arm]
        grid = _grid(mine, lr[mine.index], "mean" if by is None else "min")
        if grid is None:
            continue
        final, left_out = grid
        vocab = numeric_param(mine, "model.vocab_size").dropna()
        if final.shape[1] < MIN_LRS or vocab.empty:
            continue
        initial = math.log(float(vocab.iloc[0]))
        values = final.to_numpy(float)
        per_seed = lr_sensitivity(values, initial)
        out.append(
            LrSensitivity(
                arm=labels[arm],
                lrs=[float(x) for x in final.columns],
                seeds=[int(s) for s in final.index],
                final=values,
                initial=initial,
                per_seed=per_seed,
                estimate=t_estimate(per_seed, level),
                left_out=left_out,
                level=level,
            )
        )
    return out


def _grid(
    runs: pd.DataFrame, lr: pd.Series, aggfunc: str = "mean"
) -> tuple[pd.DataFrame, list[float]] | None:
    """[seeds, lrs] of an arm's final losses (inf: diverged; a seed's runs at one lr combined
    by `aggfunc`: reruns averaged, or the best of a profile) over the lrs every seed has a
    result at, and the lrs left out; None without results."""
    missing = pd.Series(np.nan, index=runs.index)  # no run logged it
    loss = pd.to_numeric(runs.get(f"metrics.{LOSS}", missing), errors="coerce")
    reason = runs.get(f"tags.{FAILURE_REASON_TAG}", pd.Series(None, index=runs.index))
    finished = (runs["status"] == "FINISHED") & loss.notna()
    said = reason.map(lambda r: isinstance(r, str) and "non-finite" in r).astype(bool)
    diverged = said | (finished & ~np.isfinite(loss))
    value = loss.where(~diverged, math.inf).where(finished | diverged)
    frame = pd.DataFrame({"seed": runs["seed"], "lr": lr, "value": value}).dropna()
    if frame.empty:
        return None
    table = frame.pivot_table(index="seed", columns="lr", values="value", aggfunc=aggfunc)
    complete = table.columns[table.notna().all()]
    left_out = [float(x) for x in table.columns if x not in complete]
    return table[complete].sort_index(axis=1), left_out


def _labels(runs: pd.DataFrame, arm_of: pd.Series, lr_param: str = LR_PARAM) -> dict[str, str]:
    """Each arm's name: its variant without the lr's assignment, and the params that tell it
    from another arm of that variant (a sweep's other searched params)."""
    variant = runs["variant"].fillna("").astype(str).map(_without_lr)
    params = [
        c
        for c in runs.columns
        if c.startswith("params.")
        and c != f"params.{lr_param}"
        and c.removeprefix("params.") not in UNPOOLED_PARAMS
        and not c.removeprefix("params.").startswith(UNPOOLED_PREFIXES)
    ]
    labels = {}
    for name in dict.fromkeys(variant):
        same = variant == name
        arms = list(dict.fromkeys(arm_of[same]))
        varying = [c for c in params if runs.loc[same, c].astype(str).nunique() > 1]
        for arm in arms:
            first = runs[same & (arm_of == arm)].iloc[0]
            extra = [f"{c.removeprefix('params.')}={first[c]}" for c in varying]
            labels[arm] = ",".join([name, *extra]) if len(arms) > 1 else name
    return labels


def _without_lr(variant: str) -> str:
    """A variant's name without its lr assignment (`base` when nothing is left)."""
    kept = [part for part in variant.split(",") if part.split("=")[0] not in LR_LABELS]
    return ",".join(kept) or "base"


def sensitivity_figure(results: list[LrSensitivity]) -> Figure:
    """Each arm's final loss against the lr (log scale): the mean over seeds, a line, and each
    seed's runs, points; diverged runs at the initial loss."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    for k, result in enumerate(results):
        capped = result.capped
        color = plt.get_cmap("tab10")(k % 10)
        ax.plot(result.lrs, capped.mean(axis=0), "o-", color=color, label=result.arm)
        for row in capped:
            ax.plot(result.lrs, row, ".", color=color, alpha=0.4)
    ax.set_xscale("log")
    ax.set_xlabel(LR_PARAM)
    ax.set_ylabel(f"final {LOSS} (nats; diverged: initial loss)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def sensitivity_rows(results: list[LrSensitivity]) -> tuple[list[str], list[list[str]]]:
    """A row per arm: the sensitivity with its interval, the grid, the best lr and loss."""
    levels = sorted({f"{100 * r.level:.4g}%" for r in results}) or ["95%"]
    headers = ["arm", f"lr sensitivity (nats) [{', '.join(levels)} CI]", "seeds", "lrs", "best lr (mean)", "best loss (mean)", "lrs left out"]  # fmt: skip
    rows = []
    for r in results:
        e = r.estimate
        interval = "" if math.isnan(e.low) else f" [{e.low:.4g}, {e.high:.4g}]"
        means = r.capped.mean(axis=0)
        best = int(np.argmin(means))
        rows.append(
            [r.arm, f"{e.value:.4g}{interval}", str(len(r.seeds)),
             ", ".join(f"{x:g}" for x in r.lrs), f"{r.lrs[best]:g}", f"{means[best]:.4f}",
             ", ".join(f"{x:g}" for x in r.left_out) or "none"]
        )  # fmt: skip
    return headers, rows


def sensitivity_blocks(results: list[LrSensitivity], png: bytes | None) -> list[Block]:
    """The report's section "Lr sensitivity": a row per arm with an lr grid and the figure of
    the curves (`png`); nothing without a grid."""
    if not results:
        return []
    blocks: list[Block] = [
        Heading(2, "Lr sensitivity"),
        Paragraph(
            "Wortsman et al. (2023)'s lr sensitivity of each arm with runs at several lrs: per "
            f"seed, the mean over the grid of min(final {LOSS}, initial loss) minus the best "
            "final loss over the grid (the initial loss is ln(vocabulary); a diverged run counts "
            f"at it), then its mean over seeds with a {100 * results[0].level:.4g}% t interval. "
            "Lower is less sensitive; 0 "
            "when every lr reaches the best.",
            "caption",
        ),
        Table(*sensitivity_rows(results), "ladder"),
    ]
    if png is not None:
        blocks.append(FigureBlock("lr_sensitivity.png", FIGURE_CAPTION, png, anchor="fig-lr"))
    return blocks
