"""`minimind study bench`: each arm resolved to the spec its runs train, timed alone on tiny
models side by side, written to cost.csv beside the report; its command line's errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from minimind.cli import main
from minimind.study.arm_specs import arm_specs
from minimind.study.cost import COST_FILE, CostSettings, measure_cost, read_cost
from minimind.study.manifest import load_study
from minimind.training.optim import optimizer_flops_per_step


@pytest.fixture
def study_path(tmp_path: Path, write_spec) -> Path:
    """A study of two specs the streams run: `tiny` (two norms) and a sweep's best.yaml
    (AdamW and Muon, logging to `tuned`), and one tuned arm whose best.yaml was never written;
    `base` is the reference of most comparisons, `base_b` its A/A twin."""
    arms_spec = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]})
    best = tmp_path / "sweep" / "best.yaml"
    best.parent.mkdir()
    tree = yaml.safe_load(write_spec(name="tuned-best").read_text())
    tree["tracking"]["experiment"] = "tuned"
    tree["ablate"] = {"train.optimizer.name": ["adamw", "muon"]}
    best.write_text(yaml.safe_dump(tree, sort_keys=False))
    missing = tmp_path / "other-sweep" / "best.yaml"
    arms = {
        "base": {
            "label": "RMSNorm",
            "experiment": "tiny",
            "variant": "norm=rmsnorm",
            "seeds": [0, 1, 2],
        },
        "base_b": {
            "label": "RMSNorm B",
            "experiment": "tiny",
            "variant": "norm=rmsnorm",
            "seeds": [3, 4],
        },
        "layernorm": {"label": "LayerNorm", "experiment": "tiny", "variant": "norm=layernorm"},
        "muon": {
            "label": "Muon tuned",
            "experiment": "tuned",
            "where": {"train.optimizer": "muon"},
        },
        "gone": {"label": "never tuned", "experiment": "other", "where": {"model.block": "x"}},
    }
    comparisons = [
        {"arm": "layernorm", "against": "base", "expect": "equal"},
        {"arm": "base_b", "against": "base", "expect": "equal"},
        {"arm": "gone", "against": "muon", "expect": "equal"},
    ]
    manifest = {
        "name": "cost",
        "title": "Cost",
        "equivalence_margin": 0.02,
        "streams": [
            [f"minimind run {arms_spec}", f"minimind sweep {arms_spec}"],
            [f"minimind run {best} -o seeds=[0]", f"minimind run {missing}"],
        ],
        "arms": arms,
        "axes": [
            {
                "name": "axis",
                "title": "Axis",
                "expected": "equal",
                "references": ["Somebody 2020"],
                "comparisons": comparisons,
            }
        ],
        "report_dir": str(tmp_path / "report"),
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_each_arm_resolves_to_the_variant_of_the_command_that_trains_it(study_path: Path):
    study = load_study(study_path)
    specs, notes = arm_specs(study)
    assert {k: s.variant.name for k, s in specs.items()} == {
        "base": "norm=rmsnorm",
        "base_b": "norm=rmsnorm",
        "layernorm": "norm=layernorm",
        "muon": "name=muon",
    }
    # a tuned arm: the best.yaml cell whose params equal its `where`, with the stream's overrides
    muon = specs["muon"]
    assert muon.variant.spec.train.optimizer.name == "muon"
    assert muon.command.step.spec.endswith("sweep/best.yaml") and muon.command.step.seeds == (0,)
    assert muon.variant.spec.seeds == [0]
    # the best.yaml its sweep never wrote: the arm is left out with a note naming the file
    (note,) = notes.values()
    assert note.startswith("arms.gone: no stream's run step trains where")
    assert "other-sweep/best.yaml" in note and "not loaded" in note
    assert study.cost_baseline_arm() == "base"


def test_every_arm_is_timed_alone_side_by_side_and_written_beside_the_report(
    study_path: Path, tmp_path: Path, capsys
) -> None:
    threads = torch.get_num_threads()
    report = tmp_path / "report"
    code = main(["study", "bench", str(study_path), "--rounds", "2", "--steps-per-round", "2"])
    assert code == 0
    assert torch.get_num_threads() == threads  # the study's threads only while timing
    err = capsys.readouterr().err
    assert "round 1/2 done" in err and "round 2/2 done" in err  # a line per round off a TTY
    table = read_cost(report / COST_FILE)
    assert table is not None
    arms = table.arms.set_index("arm")
    assert list(arms.index) == ["base", "base_b", "layernorm", "muon", "gone"]
    assert {"cpu", "threads", "torch", "timing", "cost baseline"} <= set(table.environment)
    assert table.environment["threads"] == "1"
    measured = arms.drop(index="gone")
    assert (measured[["ms_per_step", "tokens_per_s", "peak_mib", "cost_ratio"]] > 0).all().all()
    assert (measured["ms_per_step_min"] <= measured["ms_per_step"]).all()
    assert (measured["ms_per_step"] <= measured["ms_per_step_max"]).all()
    assert arms.loc["base", "cost_ratio"] == 1.0  # the baseline against itself, round by round
    # an A/A arm takes its reference's runs: one candidate, one measurement
    assert arms.loc["base_b", "ms_per_step"] == arms.loc["base", "ms_per_step"]
    # FLOPs/token: the model's and the optimizer's own (Muon's Newton-Schulz), as a run's params
    study = load_study(study_path)
    spec = arm_specs(study)[0]["muon"].variant.spec
    model_cfg, train = spec.model_config_obj(), spec.train
    muon_flops = optimizer_flops_per_step(model_cfg, train.optimizer) / train.tokens_per_step
    assert muon_flops > 0
    assert arms.loc["muon", "flops_per_token"] == pytest.approx(
        model_cfg.flops_per_token(train.seq_len) + muon_flops
    )
    assert pd.isna(arms.loc["gone", "ms_per_step"]) and "other-sweep" in arms.loc["gone", "note"]
    # nothing trained into MLflow: the specs' store was never created
    assert not (tmp_path / "mlflow.db").exists()
    # Each row is keyed by the spec it measured: once the sweep writes another best.yaml, the
    # tuned arm's row is stale and the report takes it no more; the others stay current.
    labels = ["RMSNorm", "RMSNorm B", "LayerNorm", "Muon tuned"]
    assert list(table.by_label(study)) == labels
    best = tmp_path / "sweep" / "best.yaml"
    tree = yaml.safe_load(best.read_text())
    tree["train"]["optimizer"] = {"lr": 0.02}
    best.write_text(yaml.safe_dump(tree, sort_keys=False))
    assert list(table.by_label(load_study(study_path))) == labels[:3]


def test_each_round_times_a_block_of_steps_of_every_arm_in_rotated_order(
    study_path: Path, monkeypatch
) -> None:
    from minimind.training.trainer import Trainer

    calls: list[int] = []
    step_once = Trainer.step_once

    def counted(self: Trainer) -> None:
        calls.append(
            int(self.model_cfg.norm == "layernorm") + 2 * (self.cfg.optimizer.name == "muon")
        )
        step_once(self)

    monkeypatch.setattr(Trainer, "step_once", counted)
    study = load_study(study_path)
    table = measure_cost(study, CostSettings(rounds=2, steps=3, warmup=1))
    blocks = [(arm, len(list(run))) for arm, run in itertools.groupby(calls)]
    base, layernorm, muon = 0, 1, 2  # the A/A twin shares base's trainer
    assert blocks == [
        *[(base, 3), (layernorm, 3), (muon, 3)],  # warm-up
        *[(base, 3), (layernorm, 3), (muon, 3)],  # round 1
        *[(layernorm, 3), (muon, 3)],  # round 2, rotated: base last, then
        *[(base, 3 + 1), (layernorm, 1), (muon, 1)],  # one step each for the peak memory
    ]
    assert table.arms.set_index("arm").loc["muon", "spec"].endswith("best.yaml -o 'seeds=[0]'")


def _bench(path: Path, *extra: str) -> list[str]:
    return ["study", "bench", str(path), *extra]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["--steps-per-round", "0"], "--steps-per-round must be >= 1, got 0"),
    ],
)
def test_bad_bench_options_exit_2_in_one_line(
    study_path: Path, tmp_path: Path, capsys, argv: list[str], message: str
) -> None:
    assert main(_bench(study_path, *argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(
    ("baseline", "message"),
    [
        ("gone", "cost_baseline: gone cannot be measured: arms.gone: no stream's"),
        ("nope", "cost_baseline: unknown arm 'nope'"),
    ],
)
def test_a_baseline_that_cannot_be_measured_exits_2(
    study_path: Path, tmp_path: Path, capsys, baseline: str, message: str
) -> None:
    tree = yaml.safe_load(study_path.read_text())
    study_path.write_text(yaml.safe_dump({**tree, "cost_baseline": baseline}))
    assert main(_bench(study_path, "--rounds", "1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "report" / COST_FILE).exists()
