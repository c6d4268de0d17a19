"""A tuned value on the edge of what its sweep tried is flagged (`minimind.compare.tuning`), in
`minimind compare` as in the study."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main
from minimind.compare import runs
from minimind.compare.tuning import edge_warnings, tuning_curves
from minimind.tracking import backend

T0 = 1_700_000_000_000


def trials(cells: dict[str, list[float]]) -> pd.DataFrame:
    """Trials of one sweep: per block (a cell, its own Optuna study) the learning rates tried."""
    return pd.DataFrame(
        [
            {"params.model.block": block, "params.lr": str(lr), "tags.study": f"s/block={block}"}
            for block, rates in cells.items()
            for lr in rates
        ]
    )


def arm(block: str, lr: str) -> pd.DataFrame:
    return pd.DataFrame([{"params.model.block": block, "params.lr": lr}] * 3)


def test_a_value_at_either_end_of_its_cell_s_trials_is_an_edge() -> None:
    grid = trials({"pre": [1e-3, 2e-3, 4e-3], "post": [1e-3, 2e-3, 4e-3, 8e-3]})
    assert edge_warnings(arm("pre", "0.004"), grid) == [
        "lr = 0.004 is the highest value its sweep tried ([0.001, 0.004]): the optimum may lie "
        "beyond the range, so it is not tuned"
    ]
    assert "lowest" in edge_warnings(arm("post", "1e-3"), grid)[0]  # 1e-3 is 0.001
    assert edge_warnings(arm("post", "0.004"), grid) == []  # inside post-norm's grid
    assert edge_warnings(arm("other", "0.004"), grid) == []  # no cell of this sweep


def test_two_values_tried_have_no_inside_so_no_edge() -> None:
    assert edge_warnings(arm("pre", "0.004"), trials({"pre": [1e-3, 4e-3]})) == []


def test_the_seeds_of_a_trial_are_repeats_not_a_searched_param() -> None:
    # each rate on seeds 0-2 (`sweep.seeds_per_trial: 3`), and best.yaml run on the same seeds
    grid = trials({"pre": [1e-3, 2e-3, 4e-3]})
    grid = pd.concat([grid.assign(**{"params.seed": str(seed)}) for seed in (0, 1, 2)])
    tuned = arm("pre", "0.002").assign(**{"params.seed": ["0", "1", "2"]})
    assert edge_warnings(tuned, grid) == []


def test_a_sweep_s_own_settings_neither_set_its_cells_apart_nor_must_its_arm_log_them() -> None:
    # one trial of pre-norm ran before the sweep's grid changed (another `sweep.trials`); the
    # best.yaml runs log no `sweep.*`, and the runs past the grid log the spec's own
    grid = trials({"pre": [1e-3, 2e-3, 4e-3], "post": [1e-3, 2e-3, 4e-3]})
    grid["params.sweep.trials"] = ["4", "3", "3", "3", "3", "3"]
    past = pd.DataFrame(
        [{"params.model.block": "post", "params.lr": "0.008", "params.sweep.trials": "9"}]
    )
    assert (
        "highest value its sweep tried ([0.001, 0.004])"
        in edge_warnings(arm("post", "0.004"), grid)[0]
    )
    (curve,) = tuning_curves(arm("post", "0.002"), grid, past)
    assert len(curve.trials) == 3 and len(curve.past) == 1


def test_runs_past_the_grid_count_as_tried_where_they_train_as_the_cell_does() -> None:
    grid = trials({"pre": [1e-3, 2e-3, 4e-3], "post": [1e-3, 2e-3, 4e-3]})
    grid["params.steps"] = "300"

    def past(block: str, lr: float, steps: str = "300") -> pd.DataFrame:
        # a plain run of another spec: its own name, no study tag
        return pd.DataFrame(
            [{"params.model.block": block, "params.lr": str(lr), "params.steps": steps,
              "params.name": "edge"}]
        )  # fmt: skip

    assert edge_warnings(arm("pre", "0.004"), grid, past("pre", 8e-3)) == []
    # a run of the other cell, or one that trains otherwise, tries nothing for this cell
    assert edge_warnings(arm("pre", "0.004"), grid, past("post", 8e-3)) != []
    assert edge_warnings(arm("pre", "0.004"), grid, past("pre", 8e-3, steps="100")) != []
    # the value tried past the grid is now the edge
    assert (
        "highest value its sweep tried ([0.001, 0.008])"
        in edge_warnings(arm("pre", "0.008"), grid, past("pre", 8e-3))[0]
    )


def test_an_arm_s_tuning_curve_is_its_cell_s_trials_with_the_runs_past_its_grid() -> None:
    grid = trials({"pre": [1e-3, 2e-3, 4e-3], "post": [1e-3, 2e-3, 4e-3]})
    past = pd.DataFrame(
        [{"params.model.block": block, "params.lr": "0.008"} for block in ("pre", "post")]
    )
    (curve,) = tuning_curves(arm("post", "0.002"), grid, past)
    assert (curve.param, curve.chosen) == ("lr", 0.002)
    assert set(curve.trials["params.model.block"]) == {"post"} and len(curve.trials) == 3
    assert curve.past.to_dict("records") == [{"params.model.block": "post", "params.lr": "0.008"}]
    assert tuning_curves(arm("other", "0.002"), grid, past) == []  # no cell of this sweep
    assert tuning_curves(arm("pre", "0.004"), grid)[0].past.empty


def finished(runs: pd.DataFrame, seeds: list[int] | None = None) -> pd.DataFrame:
    """`runs` as a store's runs table has them: each FINISHED, on seed 0 unless `seeds` (one
    per row) says otherwise, started in the order of the rows."""
    return runs.assign(
        seed=seeds if seeds is not None else 0, status="FINISHED", start_time=range(len(runs))
    )


def test_a_run_past_the_grid_that_beat_every_trial_means_the_arm_is_not_tuned() -> None:
    grid = finished(trials({"pre": [1e-3, 2e-3, 4e-3]}))
    grid["val/bpb"] = [2.6, 2.5, 2.55]  # the sweep's best: 2e-3
    past = finished(
        pd.DataFrame([{"params.model.block": "pre", "params.lr": "0.008", "val/bpb": 2.4}])
    )
    assert edge_warnings(arm("pre", "0.002"), grid, past, "val/bpb") == [
        "runs past its sweep's grid (lr = 0.008) scored 2.4, better than the sweep's best 2.5: "
        "the value is not the best tried, so it is not tuned"
    ]
    past["val/bpb"] = 2.51  # tried, and worse: 2e-3 stays tuned
    assert edge_warnings(arm("pre", "0.002"), grid, past, "val/bpb") == []
    # a larger-is-better objective: the direction is the metric's
    grid["perf/tokens_per_s"], past["perf/tokens_per_s"] = [1.0, 2.0, 3.0], 2.5
    assert edge_warnings(arm("pre", "0.002"), grid, past, "perf/tokens_per_s") == []


def test_points_of_several_seeds_are_read_by_their_median_as_the_sweep_scores_them() -> None:
    grid = trials({"pre": [1e-3, 2e-3, 4e-3]})
    grid = finished(pd.concat([grid] * 3), seeds=[0] * 3 + [1] * 3 + [2] * 3)
    grid["val/bpb"] = [2.6, 2.5, 2.55] * 3  # the sweep's best: 2e-3, 2.5 on every seed
    past = finished(
        pd.DataFrame(
            [
                {"params.model.block": "pre", "params.lr": "0.008", "val/bpb": v}
                for v in (2.4, 3.4, 3.5)
            ]
        ),
        seeds=[0, 1, 2],
    )
    # one seed past the grid scored 2.4, but the point's median is 3.4: it beat nothing
    assert edge_warnings(arm("pre", "0.002"), grid, past, "val/bpb") == []
    past["val/bpb"] = [2.4, 2.45, 3.5]  # median 2.45: better
    assert "(lr = 0.008) scored 2.45, better than the sweep's best 2.5" in "".join(
        edge_warnings(arm("pre", "0.002"), grid, past, "val/bpb")
    )


def test_a_seed_counts_once_by_its_newest_ended_run_and_a_failed_seed_fails_its_point() -> None:
    grid = finished(trials({"pre": [1e-3, 2e-3, 4e-3]}))
    grid["val/bpb"] = [2.6, 2.5, 2.55]

    def past(*runs: tuple[int, str, float]) -> pd.DataFrame:
        """Runs at 8e-3, in the order they started: (seed, status, val/bpb)."""
        rows = [{"params.model.block": "pre", "params.lr": "0.008", "seed": seed,
                 "status": status, "val/bpb": bpb} for seed, status, bpb in runs]  # fmt: skip
        return pd.DataFrame(rows).assign(start_time=range(len(runs)))

    def beaten(runs: pd.DataFrame) -> bool:
        return edge_warnings(arm("pre", "0.002"), grid, runs, "val/bpb") != []

    # seed 0 retrained after an interruption: its two runs are one seed, not two of three
    assert not beaten(past((0, "FINISHED", 2.4), (0, "FINISHED", 2.4), (1, "FINISHED", 3.0)))
    assert beaten(past((0, "FINISHED", 2.4), (1, "FINISHED", 2.4), (2, "FINISHED", 3.0)))
    # an interrupted run (KILLED) is no result: its partial score neither counts nor fails
    assert beaten(past((0, "KILLED", 3.9), (0, "FINISHED", 2.4)))
    assert not beaten(past((0, "KILLED", 2.0)))
    # a seed that failed fails its point, as the sweep fails a trial, unless trained again
    assert not beaten(past((0, "FINISHED", 2.4), (1, "FAILED", float("nan"))))
    assert beaten(past((0, "FINISHED", 2.4), (1, "FAILED", float("nan")), (1, "FINISHED", 2.4)))
    # a trial that failed at the grid's best point scores nothing there either
    grid.loc[1, "status"] = "FAILED"
    assert beaten(past((0, "FINISHED", 2.52)))


def tuned_store(tmp_path: Path) -> str:
    """A store whose arm `base` was tuned on the edge of its sweep's grid; its tracking URI."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("tune", artifact_location=str(tmp_path / "tune"))
    parent = log_parent(client, exp, "tune/base", T0)
    for number, lr in enumerate(["0.001", "0.002", "0.004"]):
        log_child(
            client, exp, parent, f"trial-{number}", 1000, T0 + number + 1,
            params={"train.optimizer.lr": lr},
            metrics=[Metric("val/bpb", 2.5 - float(lr), T0, 10)],
            tags={"trial_number": str(number), "study": "tune/base"},
        )  # fmt: skip
    parent = log_parent(client, exp, "tune-best", T0 + 100)
    for seed in range(2):
        log_child(
            client, exp, parent, "base", seed, T0 + 101 + seed,
            params={"train.optimizer.lr": "0.004"}, metrics=[Metric("val/bpb", 2.4, T0, 10)],
        )  # fmt: skip
    return uri


def test_compare_warns_of_a_group_tuned_on_its_sweep_s_edge(tmp_path, capsys) -> None:
    uri = tuned_store(tmp_path)
    assert main(["compare", "tune", "--tracking-uri", uri, "--format", "csv"]) == 0
    assert (
        "warning: base: train.optimizer.lr = 0.004 is the highest value its sweep tried"
        in capsys.readouterr().err
    )


def test_compare_opens_its_store_once(tmp_path, monkeypatch) -> None:
    # the sweep's trials for the edge warning are read through the comparison's own client
    uri = tuned_store(tmp_path)
    opened = []

    def connect_existing(tracking_uri: str) -> MlflowClient:
        opened.append(tracking_uri)
        return backend.connect_existing(tracking_uri)

    monkeypatch.setattr(runs, "connect_existing", connect_existing)
    assert main(["compare", "tune", "--tracking-uri", uri, "--format", "csv"]) == 0
    assert opened == [uri]
