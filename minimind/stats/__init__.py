"""The pure statistics, numpy and scipy (and statsmodels' corrections) only: no pandas, MLflow or
torch, so that each method can be audited on its own (docs/statistics.md).

- `intervals`: paired, Welch and bootstrap intervals of a difference, Holm's step-down levels,
  the seed-to-seed noise;
- `power`: power, detectable differences and seeds needed, for difference and equivalence (TOST);
- `sequential`: the group-sequential design (looks, O'Brien–Fleming spending, stopping rules);
- `scaling`: the power-law fits of a ladder and their trend tests;
- `compute`: the compute multiplier read off a validation curve.
"""
