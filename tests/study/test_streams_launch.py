"""`minimind study --train --launcher slurm`: what each stream command gets, and the one-line
refusal of an override that is not a launcher setting."""

from __future__ import annotations

import sys

from minimind.cli import main
from minimind.study.streams import Launch, _argv

SLURM = Launch("slurm", ("launcher.partition=gpu",))


def test_training_commands_get_the_launch_and_a_run_resumes():
    head = [sys.executable, "-m", "minimind"]
    added = ["--launcher", "slurm", "--override=launcher.partition=gpu"]
    assert _argv("minimind run a.yaml", SLURM) == [*head, "run", "a.yaml", *added, "--resume"]
    assert _argv("minimind run a.yaml --resume", SLURM).count("--resume") == 1
    assert _argv("minimind sweep s.yaml", SLURM) == [*head, "sweep", "s.yaml", *added]
    assert _argv("minimind sweep s.yaml --best", SLURM) == [*head, "sweep", "s.yaml", "--best"]
    assert _argv("minimind registry norm", SLURM) == [*head, "registry", "norm"]
    assert _argv("minimind run a.yaml") == [*head, "run", "a.yaml", "--resume"]  # local
    local = Launch("local")
    assert _argv("minimind run a.yaml", local) == [
        *head,
        *("run", "a.yaml", "--launcher", "local", "--resume"),
    ]


def test_a_study_override_must_be_a_launcher_setting(tmp_path, capsys):
    code = main(["study", str(tmp_path / "study.yaml"), "--train", "-o", "train.steps=5"])
    assert code == 2
    err = capsys.readouterr().err
    assert err == "error: -o: a study passes launcher settings only, got train.steps=5\n"


def test_a_bad_launcher_setting_is_refused_before_any_stream_starts(tmp_path, capsys):
    manifest = tmp_path / "study.yaml"
    argv = ["study", str(manifest), "--train", "-o", "launcher.timeout_min=0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: launcher.timeout_min: ") and err.count("\n") == 1
    argv[-1] = "launcher.partiton=gpu"
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: launcher.partiton: ")
    argv[-1] = "launcher.partition=gpu"  # a good one goes on to the manifest
    assert main(argv) == 2
    assert capsys.readouterr().err.endswith("study.yaml: file not found\n")
