"""Other sequential designs against the study's (looks 3, 6, 9, 12, O'Brien-Fleming-type): the
family-wise error with no true difference and the mean seeds at a 1.5 sd effect, as a share of the
fixed design with the same power (docs/statistics.md, "Sequential seeds").

    python scripts/probes/sequential_designs.py

Each design's boundaries are on the paired t statistics themselves (`sequential.t_levels`), as
the shipped design's are; the figures with z boundaries applied to t, before that calibration,
are kept in scripts/probes/README.md.
"""

from __future__ import annotations

import argparse

import numpy as np

from minimind.stats.sequential import (
    SequentialDesign,
    Spending,
    fixed_design_rejections,
    simulate,
)

DESIGNS: list[tuple[tuple[int, ...], Spending]] = [
    ((3, 6, 9, 12), "obrien_fleming"),
    ((3, 6, 9, 12), "pocock"),
    ((4, 6, 8, 10, 12), "obrien_fleming"),
    ((4, 6, 8, 10, 12, 14), "obrien_fleming"),
    ((4, 6, 8, 10, 12, 14), "pocock"),
    ((3, 5, 7, 9, 11, 13), "pocock"),
]


def fixed_seeds_for(power: float, effects: np.ndarray) -> int:
    """The fewest seeds of a fixed design (Holm over the axis) that reach `power`."""
    for seeds in range(2, 40):
        if fixed_design_rejections(effects, seeds, 0.05, 10_000, seed=3).mean() >= power:
            return seeds
    raise ValueError("no fixed design of up to 40 seeds reaches that power")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(
        "looks | spending | comparisons | FWER (20,000 axes) | power | mean seeds | fixed | ratio"
    )
    for looks, spending in DESIGNS:
        design = SequentialDesign(looks, 0.05, spending)
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
