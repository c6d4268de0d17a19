"""A tuned optimum on the edge of the searched range is flagged, not called tuned
(`minimind.sweep.space.edge_warnings`, printed by `minimind sweep --best`)."""

import pytest

from minimind.spec import ParamSpec
from minimind.sweep.space import edge_warnings

LR_GRID = ParamSpec(type="categorical", choices=[1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])


@pytest.mark.parametrize(
    ("param", "value", "flagged"),
    [
        (LR_GRID, 1.6e-2, "highest"),
        (LR_GRID, 1e-3, "lowest"),
        (LR_GRID, 4e-3, None),
        (ParamSpec(type="float", low=1e-4, high=1e-1, log=True), 9.5e-2, "highest"),
        (ParamSpec(type="float", low=1e-4, high=1e-1, log=True), 1e-2, None),
        (ParamSpec(type="float", low=0.0, high=1.0, step=0.25), 0.0, "lowest"),
        (ParamSpec(type="int", low=1, high=8), 5, None),
        (ParamSpec(type="int", low=1, high=8), 8, "highest"),
        (ParamSpec(type="categorical", choices=["adamw", "muon"]), "muon", None),
        (ParamSpec(type="categorical", choices=[1, 2]), 2, None),  # no inside to be tuned in
    ],
)
def test_an_optimum_on_the_edge_is_flagged(param, value, flagged):
    warnings = edge_warnings({"train.optimizer.lr": param}, {"train.optimizer.lr": value})
    if flagged is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and f"is the {flagged} value searched" in warnings[0]
        assert "widen it before calling the value tuned" in warnings[0]
