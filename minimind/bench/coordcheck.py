"""The coordinate check of μP (Yang et al. 2022, Tensor Programs V, section 7 and appendix D.1;
the `mup` package's `get_coord_data`): train a spec's model a few steps at several widths, under
the standard parametrization and under μP, and record the RMS of every layer's activations at
every step. Under μP each curve stays flat in width; under the standard parametrization the ones
the updates feed grow with it (the logits first), which is what breaks the transfer of the
learning rate.

Each width is the spec's model with `dim` set (so the heads and the MLP grow with it, as μP's
rules assume) and `parametrization` set to `standard` or to μP at the base width (the spec's own
`base_width` under mup, else the smallest width checked). Every model trains on the same batches
(the spec's data, batch size, sequence length and seed) with the spec's optimizer at its base lr,
held constant (no warm-up, no decay: the first steps are the point). Step t is the forward pass
after t updates (t = 0: the initialisation).

The coordinates, by the module whose output they are: `embedding` (the token embedding),
`layer<i>.attn`, `layer<i>.mlp` (each branch's output before it joins the residual stream),
`layer<i>.block` (the residual stream after block i) and `logits` (the model's output, after
μP's multiplier).
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from minimind.data import prepare_data
from minimind.data.batches import Tokens, TrainBatches
from minimind.foundations.atomic_file import atomic_write, atomic_write_text
from minimind.model.lm import MiniMindLM
from minimind.spec import Spec
from minimind.training.optim import build_optimizer
from minimind.training.probes.stats import rms

PARAMETRIZATIONS = ("standard", "mup")


@dataclass(frozen=True)
class Coordinate:
    """One RMS: of `coordinate` at step `step` of the model `width` wide under `parametrization`
    trained with `seed`."""

    parametrization: str
    width: int
    seed: int
    step: int
    coordinate: str
    rms: float


def base_width(spec: Spec, widths: Sequence[int]) -> int:
    """The width at which μP equals the standard parametrization: the spec's, else the smallest."""
    own = spec.model_config_obj().parametrization
    return own.base_width if own.base_width is not None else min(widths)


def _record(out: dict[str, torch.Tensor], name: str) -> Any:
    def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        out[name] = rms(output.detach())

    return hook


def _hooks(
    model: MiniMindLM, out: dict[str, torch.Tensor]
) -> list[torch.utils.hooks.RemovableHandle]:
    handles = [model.embed_tokens.register_forward_hook(_record(out, "embedding"))]
    for i, block in enumerate(model.layers):
        handles.append(block.register_forward_hook(_record(out, f"layer{i}.block")))
        for branch in ("attn", "mlp"):  # every block keeps its branches under these names
            module = block.get_submodule(branch)
            handles.append(module.register_forward_hook(_record(out, f"layer{i}.{branch}")))
    return handles


def check_width(
    spec: Spec,
    tokens: Tokens,
    width: int,
    parametrization: str,
    base: int,
    seed: int,
    steps: int,
) -> Iterator[Coordinate]:
    """The coordinates of steps 0..steps of the spec's model `width` wide under
    `parametrization` (μP at base width `base`), trained with `seed` on windows of `tokens`
    (the spec's training split)."""
    setting: Any = (
        "standard" if parametrization == "standard" else {"name": "mup", "base_width": base}
    )
    spec_config = spec.model_config_obj()
    own = spec_config.parametrization
    if parametrization == "mup" and own.name == "mup":  # the spec's own μP settings, this width
        setting = {**own.model_dump(), "base_width": base}
    config = spec_config.replace(dim=width, parametrization=setting)
    torch.manual_seed(seed)
    model = MiniMindLM(config, init_seed=seed).train()
    optimizer = build_optimizer(model, spec.train.optimizer, fused=False)
    batches = TrainBatches(tokens, spec.train.batch_size, spec.train.seq_len, seed)
    measured: dict[str, torch.Tensor] = {}
    handles = _hooks(model, measured)
    try:
        for step in range(steps + 1):
            x = next(batches)
            output = model(x, labels=x)
            assert output.logits is not None and output.loss is not None  # not chunked
            measured["logits"] = rms(output.logits.detach())
            for name, value in measured.items():
                yield Coordinate(parametrization, width, seed, step, name, float(value))
            if step < steps:
                optimizer.zero_grad(set_to_none=True)
                output.loss.backward()
                optimizer.step()
    finally:
        for handle in handles:
            handle.remove()


def coordinate_check(
    spec: Spec, widths: Sequence[int], steps: int, seeds: Sequence[int]
) -> list[Coordinate]:
    """Every coordinate of every width, parametrization and seed (`check_width`)."""
    base = base_width(spec, widths)
    tokens = prepare_data(spec.data).train_tokens
    return [
        row
        for parametrization in PARAMETRIZATIONS
        for width in widths
        for seed in seeds
        for row in check_width(spec, tokens, width, parametrization, base, seed, steps)
    ]


def mean_over_seeds(rows: Sequence[Coordinate]) -> dict[tuple[str, str, int, int], float]:
    """{(parametrization, coordinate, step, width): mean RMS over the seeds}."""
    groups: dict[tuple[str, str, int, int], list[float]] = {}
    for r in rows:
        groups.setdefault((r.parametrization, r.coordinate, r.step, r.width), []).append(r.rms)
    return {key: statistics.fmean(values) for key, values in groups.items()}


def growth(rows: Sequence[Coordinate], parametrization: str, coordinate: str, step: int) -> float:
    """RMS of `coordinate` at `step` at the largest width over the smallest (mean over seeds):
    about 1 when flat in width."""
    means = mean_over_seeds(rows)
    widths = sorted({r.width for r in rows})
    return (
        means[parametrization, coordinate, step, widths[-1]]
        / means[parametrization, coordinate, step, widths[0]]
    )


def to_csv(rows: Sequence[Coordinate]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, [f.name for f in fields(Coordinate)], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(r) for r in rows)
    return buffer.getvalue()


def read_csv(path: Path) -> list[Coordinate]:
    """The rows `to_csv` wrote to `path`."""
    with open(path, newline="") as f:
        return [
            Coordinate(
                r["parametrization"],
                int(r["width"]),
                int(r["seed"]),
                int(r["step"]),
                r["coordinate"],
                float(r["rms"]),
            )
            for r in csv.DictReader(f)
        ]


def figure(rows: Sequence[Coordinate], title: str) -> Any:
    """One panel per (parametrization, step): each coordinate's mean RMS against the width, on
    log axes (matplotlib, Agg); the `mup` package's coordinate-check layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = mean_over_seeds(rows)
    steps = sorted({r.step for r in rows})
    widths = sorted({r.width for r in rows})
    coordinates = list(dict.fromkeys(r.coordinate for r in rows))
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(
        len(PARAMETRIZATIONS),
        len(steps),
        figsize=(2.6 * len(steps), 2.6 * len(PARAMETRIZATIONS) + 0.8),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for row, parametrization in enumerate(PARAMETRIZATIONS):
        for col, step in enumerate(steps):
            ax = axes[row][col]
            for k, coordinate in enumerate(coordinates):
                values = [means[parametrization, coordinate, step, w] for w in widths]
                color = (
                    "black" if coordinate == "logits" else cmap(k / max(1, len(coordinates) - 1))
                )
                ax.plot(widths, values, marker=".", color=color, label=coordinate, lw=1.2)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{parametrization}, step {step}", fontsize=9)
            if row == len(PARAMETRIZATIONS) - 1:
                ax.set_xlabel("width (dim)")
            if col == 0:
                ax.set_ylabel("activation RMS")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    return fig


def write(rows: Sequence[Coordinate], folder: Path, title: str) -> list[Path]:
    """`coordcheck.csv` and `coordcheck.png` in `folder`, each written atomically."""
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    table, picture = folder / "coordcheck.csv", folder / "coordcheck.png"
    atomic_write_text(table, to_csv(rows))
    fig = figure(rows, title)
    try:
        atomic_write(picture, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        plt.close(fig)
    return [table, picture]
