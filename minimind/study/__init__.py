"""Studies: several ablations run by the harness and read against the literature.

`manifest` reads a study (its arms, axes, expectations and its streams of training `steps`),
`streams` runs the training, `analysis` makes each axis's corrected comparison and its findings,
and `report` writes `index.html` and `report.md`.
"""
