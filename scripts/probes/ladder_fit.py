"""The precision and the interval coverage of the ladder statistics (`minimind.stats.scaling`)
on simulated ladders of the study's noise: the tables of docs/statistics.md, "Ladders".

Rungs are log-spaced from 1.2e12 to 1.08e15 FLOPs (0.1M to 3M parameters at 20 tokens per
parameter, C = 6·N·D). The baseline's loss is 1.5 + A·C^-0.1, from 3.0 bpb at the bottom rung to
2.25 at the top. Each (seed, rung) run's final loss is the law plus a seed effect shared by the
two arms (same seed, same batches) plus each arm's own noise, scaled so that one arm's seed sd is
`sd` and the sd of a paired difference is `sd_diff`. The trend test reads each seed's paired
difference at each rung (variant − baseline), as a ladder does from its runs; the extrapolation's
simulated coverage (`extrapolation_coverage`) is not run here (`simulations=0`): these tables
measure the intervals themselves.

    python scripts/probes/ladder_fit.py precision [REPS] [PAIRED_SD ...]  (a number, or
        "independent": the arms share no seed effect, paired sd = seed sd·√2)
    python scripts/probes/ladder_fit.py coverage [REPS] [PAIRED_SD]
    python scripts/probes/ladder_fit.py null [REPS]
"""

from __future__ import annotations

import math
import sys

import numpy as np

from minimind.stats.scaling import PowerLaw, compare_on_ladder, fit_arm

BOTTOM, TOP = 1.2e12, 1.08e15
BASELINE = PowerLaw(1.5, 1.5 * BOTTOM**0.1, 0.1)
FACTOR = 10.0


def shifted(law: PowerLaw, multiplier: float) -> PowerLaw:
    """The law that reaches at compute C what `law` reaches at multiplier·C."""
    return PowerLaw(law.irreducible, law.scale * multiplier**-law.exponent, law.exponent)


def steeper(law: PowerLaw, exponent: float, multiplier_at: float, at: float) -> PowerLaw:
    """A law with the same floor and another exponent whose multiplier over `law` is
    `multiplier_at` at compute `at`."""
    target = float(law.loss(multiplier_at * at)) - law.irreducible
    return PowerLaw(law.irreducible, target * at**exponent, exponent)


def true_log_multiplier(baseline: PowerLaw, variant: PowerLaw, compute: np.ndarray) -> np.ndarray:
    return np.log([baseline.compute_for(float(variant.loss(c))) / c for c in compute])


def true_trend_slope(baseline: PowerLaw, variant: PowerLaw, compute: np.ndarray) -> float:
    """The slope on log compute of the noise-free paired difference at the rungs: what the
    trend test's mean slope estimates."""
    return float(np.polyfit(np.log(compute), variant.loss(compute) - baseline.loss(compute), 1)[0])


def simulate(baseline: PowerLaw, variant: PowerLaw, compute: np.ndarray, seeds: int, sd: float,
             sd_diff: float, rng: np.random.Generator):  # fmt: skip
    """Both arms' points per seed and each seed's paired differences at the rungs (see the
    module docstring)."""
    own = sd_diff / math.sqrt(2.0)
    shared = math.sqrt(max(sd**2 - own**2, 0.0))
    base, var, differences = {}, {}, {}
    for s in range(seeds):
        common = rng.normal(0.0, shared, len(compute))
        lb = baseline.loss(compute) + common + rng.normal(0.0, own, len(compute))
        lv = variant.loss(compute) + common + rng.normal(0.0, own, len(compute))
        base[s], var[s] = (compute, lb), (compute, lv)
        differences[s] = lv - lb
    return base, var, differences


def precision(reps: int, paired: list[str]) -> None:
    """95th percentiles over simulated ladders of |α̂ − α| (the arm's mean over seeds) and of
    |m̂ / m − 1| (the multiplier read at the top rung and at 10× it), 5 seeds per arm; the
    variant reaches at C what the baseline reaches at 1.3·C."""
    variant = shifted(BASELINE, 1.3)
    print("| rungs | seed sd | paired sd | error of α (95 %) | multiplier at top (95 %) | at 10× top (95 %) | fits refused |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for rungs in (4, 6, 8):
        compute = np.geomspace(BOTTOM, TOP, rungs)
        for sd in (0.005, 0.010, 0.015):
            for sd_diff in [sd * math.sqrt(2.0) if p == "independent" else float(p) for p in paired]:  # fmt: skip
                rng = np.random.default_rng(rungs * 1000 + int(sd * 1e4) + int(sd_diff * 1e5))
                alpha, top, far, refused = [], [], [], 0
                for _ in range(reps):
                    b, v, _ = simulate(BASELINE, variant, compute, 5, sd, sd_diff, rng)
                    try:
                        fb, fv = fit_arm(b), fit_arm(v)
                    except ValueError:
                        refused += 1
                        continue
                    alpha.append(abs(fb.exponent.value - BASELINE.exponent))
                    for out, factor in ((top, 1.0), (far, FACTOR)):
                        m = compare_on_ladder(fb, fv, {}, compute, extrapolate_factor=factor, simulations=0)  # fmt: skip
                        out.append(abs(m.extrapolated_multiplier.value / 1.3 - 1.0))
                q = [float(np.quantile(x, 0.95)) for x in (alpha, top, far)]
                print(f"| {rungs} | {sd:.3f} | {sd_diff:.3f} | {q[0]:.4f} | {100 * q[1]:.1f} % | {100 * q[2]:.1f} % | {refused}/{reps} |")  # fmt: skip


def coverage(reps: int, sd_diff: float = 0.005) -> None:
    """How often each 95 % interval holds the truth, and the trend test's rejection rate, at the
    study's median seed sd 0.010 and paired sd `sd_diff`, with a variant whose exponent is 0.12
    (multiplier 1.3 at the middle rung, growing with compute)."""
    middle = math.sqrt(BOTTOM * TOP)
    variant = steeper(BASELINE, 0.12, 1.3, middle)
    print("| rungs | seeds | α | E | A | α difference | multiplier at 10× top | trend slope | trend found | identical arms: trend found | refused |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rungs in (4, 6):
        compute = np.geomspace(BOTTOM, TOP, rungs)
        true_slope = true_trend_slope(BASELINE, variant, compute)
        true_far = math.exp(true_log_multiplier(BASELINE, variant, np.array([FACTOR * TOP]))[0])
        for seeds in (3, 5):
            rng = np.random.default_rng(rungs * 10 + seeds)
            hits = np.zeros(8)
            done = refused = 0
            for _ in range(reps):
                b, v, diffs = simulate(BASELINE, variant, compute, seeds, 0.010, sd_diff, rng)
                _, same, null_diffs = simulate(BASELINE, BASELINE, compute, seeds, 0.010, sd_diff, rng)  # fmt: skip
                try:
                    fb, fv, fs = fit_arm(b), fit_arm(v), fit_arm(same)
                except ValueError:
                    refused += 1
                    continue
                r = compare_on_ladder(fb, fv, diffs, compute, extrapolate_factor=FACTOR, simulations=0)  # fmt: skip
                null = compare_on_ladder(fb, fs, null_diffs, compute, extrapolate_factor=FACTOR, simulations=0)  # fmt: skip
                m = r.extrapolated_multiplier
                hits += [
                    fb.exponent.low <= BASELINE.exponent <= fb.exponent.high,
                    fb.irreducible.low <= BASELINE.irreducible <= fb.irreducible.high,
                    fb.scale.low <= BASELINE.scale <= fb.scale.high,
                    r.exponent_difference.low
                    <= variant.exponent - BASELINE.exponent
                    <= r.exponent_difference.high,  # fmt: skip
                    m.low <= true_far <= m.high,
                    r.trend_slope.low <= true_slope <= r.trend_slope.high,
                    r.trend == "grows",
                    null.trend != "no trend detected",
                ]
                done += 1
            cells = " | ".join(f"{100 * h / done:.1f} %" for h in hits)
            print(f"| {rungs} | {seeds} | {cells} | {refused}/{reps} |")
    print(f"\n(reps {reps}: Monte-Carlo sd of a 95 % coverage {100 * math.sqrt(0.95 * 0.05 / reps):.1f} points, of a 5 % rate {100 * math.sqrt(0.05 * 0.95 / reps):.1f})")  # fmt: skip


def null(reps: int) -> None:
    """The trend test's rejection rate on ladders of two identical arms (no fits needed: the
    test reads the per-rung paired differences only)."""
    print("| rungs | seeds | paired sd | trend found |")
    print("|---|---|---|---|")
    for rungs, seeds in ((4, 3), (4, 5), (6, 3), (6, 5)):
        compute = np.geomspace(BOTTOM, TOP, rungs)
        arm = fit_arm({s: (compute, BASELINE.loss(compute)) for s in range(seeds)})
        for sd_diff in (0.005, 0.010):
            rng = np.random.default_rng(rungs * 100 + seeds * 10 + int(sd_diff * 1e3))
            found = 0
            for _ in range(reps):
                _, _, diffs = simulate(BASELINE, BASELINE, compute, seeds, 0.010, sd_diff, rng)
                result = compare_on_ladder(arm, arm, diffs, compute, extrapolate_factor=1.0, simulations=0)  # fmt: skip
                found += result.trend != "no trend detected"
            print(f"| {rungs} | {seeds} | {sd_diff:.3f} | {100 * found / reps:.2f} % |")
    print(f"\n(reps {reps}: Monte-Carlo sd of a 5 % rate {100 * math.sqrt(0.05 * 0.95 / reps):.2f} points)")  # fmt: skip


if __name__ == "__main__":
    table = sys.argv[1] if len(sys.argv) > 1 else "coverage"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    if table == "coverage":
        coverage(count, float(sys.argv[3]) if len(sys.argv) > 3 else 0.005)
    elif table == "precision":
        precision(count, sys.argv[3:] or ["0.001", "0.005", "independent"])
    else:
        null(count)
