"""Other sequential designs against the study's (looks 3, 6, 9, 12, O'Brien-Fleming-type): the
family-wise error with no true difference and the mean seeds at a 1.5 sd effect, as a share of the
fixed design with the same power (docs/statistics.md, "Sequential seeds").

    python scripts/probes/sequential_designs.py            # each look's level on the paired t
    python scripts/probes/sequential_designs.py --exact-t  # boundaries calibrated on the t itself

`--exact-t` replaces each look's nominal level (the z boundary's, applied to the t test of that
look's seeds) by a boundary on the paired t statistics themselves, calibrated by simulation:
under no difference their joint law across looks does not depend on the sd, so 300,000 simulated
axes at sd 1 give boundaries whose first crossings spend exactly the spending function's error.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
from scipy import stats

from minimind.stats.sequential import (
    SequentialDesign,
    Spending,
    fixed_design_rejections,
    simulate,
    spent_alpha,
)

DESIGNS: list[tuple[tuple[int, ...], Spending]] = [
    ((3, 6, 9, 12), "obrien_fleming"),
    ((3, 6, 9, 12), "pocock"),
    ((4, 6, 8, 10, 12), "obrien_fleming"),
    ((4, 6, 8, 10, 12, 14), "obrien_fleming"),
    ((4, 6, 8, 10, 12, 14), "pocock"),
    ((3, 5, 7, 9, 11, 13), "pocock"),
]
CALIBRATION_DRAWS = 300_000


@functools.cache
def exact_t_levels(looks: tuple[int, ...], alpha: float, spending: Spending) -> np.ndarray:
    """[looks]: the two-sided p-value threshold of each look's paired t test whose first
    crossings, simulated under no difference, spend the spending function's increments."""
    x = np.random.default_rng(12345).standard_normal((CALIBRATION_DRAWS, looks[-1]))
    total, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    going_on = np.ones(CALIBRATION_DRAWS, dtype=bool)
    spent_before, levels = 0.0, []
    for n in looks:
        mean = total[:, n - 1] / n
        t = np.abs(mean) / np.sqrt((squares[:, n - 1] - n * mean**2) / (n - 1) / n)
        spent = spent_alpha(n / looks[-1], alpha, spending)
        crossings = round((spent - spent_before) * CALIBRATION_DRAWS)
        spent_before = spent
        ranked = np.sort(t[going_on])[::-1]
        bound = np.inf if crossings <= 0 else (ranked[crossings - 1] + ranked[crossings]) / 2
        going_on &= t < bound
        levels.append(2 * stats.t.sf(bound, n - 1))
    return np.array(levels)


class ExactT(SequentialDesign):
    def nominal_levels(self, comparisons: int) -> np.ndarray:
        return np.array(
            [
                exact_t_levels(self.looks, self.alpha / r, self.spending)
                for r in range(1, comparisons + 1)
            ]
        )


def fixed_seeds_for(power: float, effects: np.ndarray) -> int:
    """The fewest seeds of a fixed design (Holm over the axis) that reach `power`."""
    for seeds in range(2, 40):
        if fixed_design_rejections(effects, seeds, 0.05, 10_000, seed=3).mean() >= power:
            return seeds
    raise ValueError("no fixed design of up to 40 seeds reaches that power")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact-t", action="store_true", help="boundaries calibrated on the t")
    kind = ExactT if parser.parse_args().exact_t else SequentialDesign
    print(
        "looks | spending | comparisons | FWER (20,000 axes) | power | mean seeds | fixed | ratio"
    )
    for looks, spending in DESIGNS:
        design = kind(looks, 0.05, spending)
        for comparisons in (5, 10):
            null = simulate(np.zeros(comparisons), design, None, 20_000, seed=1)
            error = (null.stop == "difference").any(axis=1).mean()
            effects = np.full(comparisons, 1.5)
            decisions = simulate(effects, design, None, 10_000, seed=2)
            power = (decisions.stop == "difference").mean()
            fixed = fixed_seeds_for(power, effects)
            mean = decisions.seeds.mean()
            print(
                f"{looks} | {spending} | {comparisons} | {error:.4f} | {power:.3f} | "
                f"{mean:.2f} | {fixed} | {mean / fixed:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
