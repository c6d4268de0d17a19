"""What a child run carries across machines: `--resume` of a run interrupted elsewhere (refused
without its checkpoint, continued at step 0 its curve would repeat, unless `--restart` trains it
anew in a new run), and its data budget recorded as params (no token cache needed to read it)."""

from __future__ import annotations

import shutil

import pytest
from mlflow.tracking import MlflowClient

from minimind.cli import main


def children(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    return client.search_runs([found.experiment_id], "tags.`minimind.role` = 'child'")


def test_an_interrupted_run_without_its_checkpoint_resumes_only_when_restarted(
    write_spec, mlflow_uri, tmp_path, one_thread, capsys
):
    spec = str(write_spec())
    assert main(["run", spec]) == 0
    (run,) = children(mlflow_uri, "tiny")
    client = MlflowClient(mlflow_uri)
    client.set_terminated(run.info.run_id, "KILLED")  # as if stopped on another machine,
    shutil.rmtree(tmp_path / "checkpoints")  # whose checkpoints stayed there
    capsys.readouterr()

    assert main(["run", spec, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --resume: base/seed0 is KILLED and its checkpoint is not at ")
    assert "--restart" in err and err.count("\n") == 1
    (still,) = children(mlflow_uri, "tiny")  # nothing trained, nothing reopened
    assert still.info.status == "KILLED"

    assert main(["run", spec, "--resume", "--restart"]) == 0
    runs = {r.info.run_id: r for r in children(mlflow_uri, "tiny")}
    assert runs.pop(run.info.run_id).info.status == "KILLED"
    (fresh,) = runs.values()  # a new run, whose curve has each step once
    assert fresh.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(fresh.info.run_id, "train/loss")]
    assert len(steps) == len(set(steps))


def test_restart_goes_with_resume(write_spec, capsys):
    assert main(["run", str(write_spec()), "--restart"]) == 2
    assert capsys.readouterr().err == "error: --restart: goes with --resume\n"


def test_a_run_records_its_training_split_and_the_epochs_it_reads(
    write_spec, mlflow_uri, one_thread
):
    from minimind.data import prepare_data
    from minimind.spec import load_spec

    spec = write_spec()
    assert main(["run", str(spec)]) == 0
    (run,) = children(mlflow_uri, "tiny")
    train = load_spec(str(spec)).train
    split = len(prepare_data(load_spec(str(spec)).data).train_tokens)
    assert int(run.data.params["train_split_tokens"]) == split
    epochs = float(run.data.params["epochs"])
    assert epochs == pytest.approx(train.steps * train.tokens_per_step / split)
