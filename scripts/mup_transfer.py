"""Draw results/mup/ from the learning-rate transfer sweeps (scripts/mup_results.sh runs it last).

For each spec (experiments/mup/transfer_adamw.yaml, transfer_muon.yaml) and each of its ablation
cells (width × parametrization), the cell's Optuna study is read back (named as `minimind sweep`
names it: `sweep.plan.study_name`), and each grid point's final val/bpb is drawn against the lr,
one line per width and one panel per parametrization (`lr_<optimizer>.png`). `summary.md` gives
each cell's best lr, how many ×2 grid steps the best lr moves from the smallest width to the
largest under each parametrization, whether each optimum is interior, and the run times.

    python scripts/mup_transfer.py --storage sqlite:///results/generated/mup/optuna.db \
        --timings results/generated/mup/timings.txt --out results/mup
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402

from minimind.bench.coordcheck import Coordinate, growth, read_csv  # noqa: E402
from minimind.foundations.atomic_file import atomic_write, atomic_write_text  # noqa: E402
from minimind.spec import expand, load_spec  # noqa: E402
from minimind.sweep.plan import study_name  # noqa: E402

SPECS = (Path("experiments/mup/transfer_adamw.yaml"), Path("experiments/mup/transfer_muon.yaml"))
LR = "train.optimizer.lr"


@dataclass(frozen=True)
class Cell:
    """One study: the grid of one width under one parametrization."""

    optimizer: str
    parametrization: str
    width: int
    points: dict[float, float | None]  # lr -> final val/bpb (None: the trial failed, diverged)

    @property
    def best_lr(self) -> float | None:
        """The lr of the lowest final val/bpb; None before any trial finished."""
        finished = {lr: v for lr, v in self.points.items() if v is not None and math.isfinite(v)}
        return min(finished, key=finished.__getitem__) if finished else None

    @property
    def interior(self) -> bool:
        grid = sorted(self.points)
        return self.best_lr is not None and grid[0] < self.best_lr < grid[-1]


def read_cells(spec_path: Path, storage: str) -> list[Cell]:
    spec = load_spec(spec_path)
    cells = []
    for variant in expand(spec):
        cfg = variant.spec.model_config_obj()
        study = optuna.load_study(study_name=study_name(spec.name, variant.name), storage=storage)
        points: dict[float, float | None] = {}
        for trial in study.trials:
            if LR not in trial.params:
                continue
            lr = float(trial.params[LR])
            if trial.state == optuna.trial.TrialState.COMPLETE:
                points[lr] = float(trial.value)  # type: ignore[arg-type]
            elif trial.state == optuna.trial.TrialState.FAIL:
                points.setdefault(lr, None)
        cells.append(Cell(spec.train.optimizer.name, cfg.parametrization.name, cfg.dim, points))
    return cells


def grid_steps(cells: list[Cell], parametrization: str) -> str:
    """Signed ×2 grid steps of the best lr from the smallest width to the largest ('-' before
    both have a result)."""
    chosen = sorted(
        (c for c in cells if c.parametrization == parametrization), key=lambda c: c.width
    )
    first, last = chosen[0].best_lr, chosen[-1].best_lr
    return "-" if first is None or last is None else f"{round(math.log2(last / first)):+d}"


def figure(cells: list[Cell], optimizer: str):
    parametrizations = ("standard", "mup")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    widths = sorted({c.width for c in cells})
    colors = plt.get_cmap("viridis")
    for ax, parametrization in zip(axes, parametrizations, strict=True):
        for k, width in enumerate(widths):
            (cell,) = [
                c for c in cells if c.parametrization == parametrization and c.width == width
            ]
            lrs = sorted(lr for lr, v in cell.points.items() if v is not None)
            color = colors(k / max(1, len(widths) - 1))
            ax.plot(
                lrs,
                [cell.points[lr] for lr in lrs],
                marker="o",
                color=color,
                label=f"width {width}",
            )
            if cell.best_lr is not None:
                best = cell.points[cell.best_lr]
                ax.plot([cell.best_lr], [best], marker="*", ms=14, color=color)
            failed = [lr for lr, v in cell.points.items() if v is None]
            if failed:
                ax.plot(failed, [ax.get_ylim()[1]] * len(failed), "x", color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("lr" if optimizer == "adamw" else "Muon lr")
        ax.set_title(f"{optimizer}, {parametrization}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final val/bpb")
    axes[0].legend()
    fig.tight_layout()
    return fig


def coordcheck_lines(rows: list[Coordinate]) -> list[str]:
    """The coordinate check in numbers: each coordinate's RMS at the last step, widest over
    narrowest width, under each parametrization."""
    if not rows:
        return []
    widths, step = sorted({r.width for r in rows}), max(r.step for r in rows)
    lines = [
        f"Coordinate check (`coordcheck.png`): RMS at step {step}, width {widths[-1]} over width "
        f"{widths[0]}, mean over seeds {sorted({r.seed for r in rows})}:",
        "",
        "| coordinate | standard | mup |",
        "|---|---|---|",
    ]
    for coordinate in dict.fromkeys(r.coordinate for r in rows):
        ratios = [growth(rows, p, coordinate, step) for p in ("standard", "mup")]
        lines.append(f"| {coordinate} | {ratios[0]:.2f}× | {ratios[1]:.2f}× |")
    return [*lines, ""]


def summary(
    all_cells: dict[str, list[Cell]],
    timings: list[tuple[str, int]],
    coordinates: list[Coordinate],
) -> str:
    lines = [
        "# μP learning-rate transfer (results/mup)",
        "",
        "Produced by `scripts/mup_results.sh` (docs/mup.md explains the setup and the limits). "
        "Each cell is one grid study of `minimind sweep`: the lr on a ×2 grid, final exact "
        "val/bpb of one seed; ★ in the figures marks each width's best lr.",
        "",
        "| optimizer | parametrization | width | best lr | best val/bpb | interior | failed lrs |",
        "|---|---|---|---|---|---|---|",
    ]
    for optimizer, cells in all_cells.items():
        for c in sorted(cells, key=lambda c: (c.parametrization != "standard", c.width)):
            failed = ", ".join(f"{lr:g}" for lr, v in sorted(c.points.items()) if v is None)
            if c.best_lr is None:
                best = "not run | - | -"
            else:
                interior = "yes" if c.interior else "NO (edge)"
                best = f"{c.best_lr:g} | {c.points[c.best_lr]:.4f} | {interior}"
            lines.append(
                f"| {optimizer} | {c.parametrization} | {c.width} | {best} | {failed or '-'} |"
            )
    lines += [
        "",
        "Movement of the best lr from the smallest width to the largest, in ×2 grid steps:",
        "",
    ]
    lines += ["| optimizer | standard | mup |", "|---|---|---|"]
    for optimizer, cells in all_cells.items():
        lines.append(
            f"| {optimizer} | {grid_steps(cells, 'standard')} | {grid_steps(cells, 'mup')} |"
        )
    lines += [
        "",
        "Run time (OMP_NUM_THREADS=1; the two sweeps side by side, one worker each; a 2-core machine shared with other jobs):",
        "",
    ]
    lines += ["| step | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds} |" for name, seconds in timings]
    lines += [f"| total | {sum(s for _, s in timings)} |", ""]
    lines += coordcheck_lines(coordinates)
    lines += [
        "Figures: `lr_adamw.png`, `lr_muon.png`, `coordcheck.png` (data: `coordcheck.csv`, `transfer.csv`).",
        "",
    ]
    return "\n".join(lines)


def to_csv(all_cells: dict[str, list[Cell]]) -> str:
    rows = ["optimizer,parametrization,width,lr,val_bpb"]
    for optimizer, cells in all_cells.items():
        for c in cells:
            for lr, value in sorted(c.points.items()):
                rows.append(
                    f"{optimizer},{c.parametrization},{c.width},{lr!r},{'' if value is None else value!r}"
                )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True, help="the sweeps' Optuna storage URL")
    parser.add_argument("--timings", type=Path, required=True, help="lines of 'NAME SECONDS'")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    all_cells = {}
    for spec_path in SPECS:
        cells = read_cells(spec_path, args.storage)
        all_cells[cells[0].optimizer] = cells
    args.out.mkdir(parents=True, exist_ok=True)
    for optimizer, cells in all_cells.items():
        fig = figure(cells, optimizer)
        atomic_write(
            args.out / f"lr_{optimizer}.png",
            lambda f, fig=fig: fig.savefig(f, format="png", dpi=110),
        )
        plt.close(fig)
    timings = []
    for line in args.timings.read_text().splitlines():
        name, seconds = line.rsplit(" ", 1)
        timings.append((name, int(seconds)))
    atomic_write_text(args.out / "transfer.csv", to_csv(all_cells))
    coordcheck_csv = args.out / "coordcheck.csv"
    coordinates = read_csv(coordcheck_csv) if coordcheck_csv.is_file() else []
    atomic_write_text(args.out / "summary.md", summary(all_cells, timings, coordinates))
    print((args.out / "summary.md").read_text())


if __name__ == "__main__":
    main()
