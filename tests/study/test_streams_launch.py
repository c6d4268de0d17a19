"""`minimind study train --launcher slurm`: what each step's process gets, for the shipped
manifest as the command lines a person would type, and the one-line refusal of an override that
is not a launcher setting."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml

from minimind.cli import main
from minimind.study.manifest import load_study
from minimind.study.steps import RunStep, SweepStep
from minimind.study.streams import Launch, command_line, step_argv

SLURM = Launch("slurm", ("launcher.partition=gpu",))
HEAD = [sys.executable, "-m", "minimind"]
ADDED = ["--launcher", "slurm", "--override=launcher.partition=gpu"]
SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "study" / "study.yaml"
BEST = "results/generated/study_tune_{}/best.yaml"
BRANCHES = {"large": ("-o", "train.schedule.branches=[613]"), "small": ()}  # L's budget branch
EVERY = {"large": "122", "small": "110"}


def _sweep(name: str) -> list[tuple[str, list[str]]]:
    """A sweep's two steps: its trials, then its best.yaml (which trains nothing)."""
    spec = f"experiments/study/tune_{name}.yaml"
    return [
        (f"minimind sweep {spec}", ["sweep", spec, *ADDED]),
        (f"minimind sweep {spec} --best", ["sweep", spec, "--best"]),
    ]


def _evaluate(name: str, *variants: str) -> tuple[str, list[str]]:
    """A best.yaml (its `variants`, else all) trained on the first look's seeds with its size's
    branch and evaluations."""
    size = name.split("_")[0]
    options = [
        *BRANCHES[size],
        *("-o", f"train.eval_every={EVERY[size]}"),
        *("-o", "train.probe_every=25"),
        *("-o", "seeds=[0,1,2]"),
    ]
    chosen = [word for variant in variants for word in ("--variant", variant)]
    line = " ".join(["minimind run", BEST.format(name), *options, *map(shlex.quote, chosen)])
    return line, ["run", BEST.format(name), *options, *chosen, *ADDED]


def _beyond(tuned: str, name: str, lr: str, seeds: str, *variants: str) -> tuple[str, list[str]]:
    """Plain runs of a tuning spec at a rate past its grid, logged as their own experiment."""
    spec = f"experiments/study/tune_{tuned}.yaml"
    options = ["-o", f"name=study_beyond_{name}", "-o", f"train.optimizer.lr={lr}"]
    options += ["-o", f"seeds={seeds}"]
    chosen = [word for variant in variants for word in ("--variant", variant)]
    line = " ".join(["minimind run", spec, *options, *(shlex.quote(w) for w in chosen)])
    return line, ["run", spec, *options, *chosen, *ADDED]


# The shipped manifest's streams as command lines, and the argv each is launched with under SLURM.
SHIPPED_STREAMS = [
    [
        *_sweep("large"),
        _beyond(
            "large",
            "large",
            "1.0e-3",
            "[1000]",
            "mlp=relu2",
            "attention=mqa",
            "position=none",
            "position=learned",
            "norm=layernorm",
            "attention=gqa(qk_norm=rmsnorm)",
        ),
        _beyond("large_postnorm", "large_postnorm", "4.0e-3", "[1000,1001,1002]"),
        _evaluate(
            "large",
            "attention=gqa,lr=0.004",
            "position=rope-gptj,lr=0.004",
            "mlp=relu2,lr=0.002",
            "mlp=gelu,lr=0.004",
            "attention=mqa,lr=0.002",
            "position=none,lr=0.002",
            "norm=layernorm,lr=0.002",
            "attention=gqa(qk_norm=rmsnorm),lr=0.004",
        ),  # fmt: skip
    ],
    [
        *(line for name in ("large_postnorm", "large_muon") for line in _sweep(name)),
        *(line for name in ("small", "small_postnorm", "small_muon") for line in _sweep(name)),
        _beyond(
            "small",
            "small_up",
            "4.0e-2",
            "[1000]",
            "attention=gqa",
            "mlp=relu2",
            "mlp=gelu",
            "attention=mqa",
        ),
        _beyond(
            "small",
            "small_down",
            "2.5e-3",
            "[1000]",
            "position=learned",
            "attention=gqa(qk_norm=rmsnorm)",
        ),
        _beyond("small_postnorm", "small_postnorm", "1.0e-2", "[1000,1001,1002]"),
        *_sweep("large_learned"),
        *map(
            _evaluate,
            (
                "large_postnorm",
                "large_muon",
                "large_learned",
                "small",
                "small_postnorm",
                "small_muon",
            ),
        ),  # fmt: skip
    ],
]


def test_the_shipped_steps_launch_as_their_command_lines_say(tmp_path: Path) -> None:
    study = load_study(SHIPPED)
    launched = [[step_argv(step, SLURM) for step in stream] for stream in study.streams]
    expected = [
        [
            [*HEAD, *words, *(["--resume", "--restart"] if words[0] == "run" else [])]
            for _, words in stream
        ]
        for stream in SHIPPED_STREAMS
    ]
    assert launched == expected
    # the lines, as the shorthand, read into the same steps
    tree = yaml.safe_load(SHIPPED.read_text())
    tree["streams"] = [[line for line, _ in stream] for stream in SHIPPED_STREAMS]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    assert load_study(tmp_path / "study.yaml").streams == study.streams


def test_training_steps_get_the_launch_and_a_run_resumes():
    run = RunStep.model_validate({"run": "a.yaml"})
    sweep = SweepStep.model_validate({"sweep": "s.yaml"})
    best = SweepStep.model_validate({"sweep": "s.yaml", "best": True})
    assert step_argv(run, SLURM) == [*HEAD, "run", "a.yaml", *ADDED, "--resume", "--restart"]
    assert step_argv(sweep, SLURM) == [*HEAD, "sweep", "s.yaml", *ADDED]
    assert step_argv(best, SLURM) == [*HEAD, "sweep", "s.yaml", "--best"]  # trains nothing
    assert step_argv(run) == [*HEAD, "run", "a.yaml", "--resume", "--restart"]  # as each spec says
    local = Launch("local")
    assert step_argv(run, local) == [
        *HEAD,
        "run",
        "a.yaml",
        "--launcher",
        "local",
        "--resume",
        "--restart",
    ]


def test_a_run_step_s_overrides_variants_and_seeds_are_its_arguments():
    step = RunStep.model_validate(
        {"run": "a b.yaml", "overrides": ["train.steps=3"], "variants": ["x", "y"], "seeds": [4, 2]}
    )
    assert step_argv(step)[3:] == [
        *("run", "a b.yaml", "-o", "train.steps=3", "-o", "seeds=[4,2]"),
        *("--variant", "x", "--variant", "y", "--resume", "--restart"),
    ]
    # as a shell reads it: the spec's space and the seeds' brackets quoted
    assert command_line(step) == (
        "minimind run 'a b.yaml' -o train.steps=3 -o 'seeds=[4,2]' --variant x --variant y"
    )
    sweep = SweepStep.model_validate({"sweep": "s.yaml", "overrides": ["sweep.trials=2"]})
    assert command_line(sweep) == "minimind sweep s.yaml -o sweep.trials=2"


def test_a_study_override_must_be_a_launcher_setting(tmp_path, capsys):
    code = main(["study", "train", str(tmp_path / "study.yaml"), "-o", "train.steps=5"])
    assert code == 2
    err = capsys.readouterr().err
    assert err == "error: -o: a study passes launcher settings only, got train.steps=5\n"


def test_a_bad_launcher_setting_is_refused_before_any_stream_starts(tmp_path, capsys):
    manifest = tmp_path / "study.yaml"
    argv = ["study", "train", str(manifest), "-o", "launcher.timeout_min=0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: launcher.timeout_min: ") and err.count("\n") == 1
    argv[-1] = "launcher.partiton=gpu"
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: launcher.partiton: ")
    argv[-1] = "launcher.partition=gpu"  # a good one goes on to the manifest
    assert main(argv) == 2
    assert capsys.readouterr().err.endswith("study.yaml: file not found\n")
