"""`minimind run --resume` of a run interrupted elsewhere: an interrupted run whose checkpoint
is not on this machine is refused (continued at step 0, its curve would repeat) unless
`--restart` trains it anew in a new run."""

from __future__ import annotations

import shutil

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
