"""A study's streams as typed steps: each read once from its mapping or its command line, a bad
one a one-line error naming its field path; and `minimind study plan|train|bench|report`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from minimind.cli import build_parser, main
from minimind.spec import SpecError
from minimind.study.manifest import load_study
from minimind.study.steps import RunStep, SweepStep

SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "study" / "study.yaml"


def streams_of(tmp_path: Path, streams: list) -> list:
    """The streams of the shipped manifest with `streams` in place of its own, as loaded."""
    tree = yaml.safe_load(SHIPPED.read_text())
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**tree, "streams": streams}, sort_keys=False))
    return load_study(path).streams


def test_a_command_line_reads_into_the_step_its_mapping_makes(tmp_path: Path) -> None:
    lines = [
        "minimind run 'a b.yaml' -o train.steps=3 --variant x -o seeds=[0,1] --variant y",
        "minimind sweep s.yaml -o sweep.trials=4 --best",
        "minimind run a.yaml -o seeds=[0] -o 'seeds=[5, 6]'",  # the last seeds, as run reads
    ]
    mappings = [
        {
            "run": "a b.yaml",
            "overrides": ["train.steps=3"],
            "variants": ["x", "y"],
            "seeds": [0, 1],
        },
        {"sweep": "s.yaml", "overrides": ["sweep.trials=4"], "best": True},
        {"run": "a.yaml", "seeds": [5, 6]},
    ]
    (from_lines,) = streams_of(tmp_path, [lines])
    assert from_lines == streams_of(tmp_path, [mappings])[0]
    run, sweep, last = from_lines
    assert isinstance(run, RunStep) and isinstance(sweep, SweepStep)
    assert run.spec == "a b.yaml" and run.variants == ("x", "y") and run.seeds == (0, 1)
    assert run.spec_overrides() == ("train.steps=3", "seeds=[0,1]")
    assert sweep.best and sweep.overrides == ("sweep.trials=4",)
    assert last.seeds == (5, 6) and last.overrides == ()


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"run": "a.yaml", "seeds": [-1]}, "streams[0][1].seeds[0]: must be >= 0, got -1"),
        ({"run": "a.yaml", "seeds": []}, "streams[0][1].seeds: must have at least 1 item, got 0"),
        ({"run": "a.yaml", "seeds": [2, 2]}, "streams[0][1].seeds[1]: 2 is listed twice"),
        ({"run": "a.yaml", "variants": ["x", "x"]}, "streams[0][1].variants[1]: x is listed"),
        ({"run": ""}, "streams[0][1].run: must be a non-empty string"),
        (
            {"run": "a.yaml", "seed": [1]},
            "streams[0][1].seed: unknown key; choices: overrides, run",
        ),
        (
            {"sweep": "s.yaml", "variants": ["x"]},
            "streams[0][1].variants: unknown key; choices: best",
        ),
        ({"run": "a.yaml", "sweep": "s.yaml"}, "streams[0][1]: a step names exactly one of run"),
        ({"best": True}, "streams[0][1]: a step names exactly one of run"),
        (
            {"run": "a.yaml", "overrides": ["seeds=[1]"]},
            "streams[0][1].overrides[0]: a step's seeds are its `seeds`, not an override",
        ),
        (
            {"run": "a.yaml", "overrides": ["train.steps"]},
            "streams[0][1].overrides[0]: train.steps: an override must look like KEY=VALUE",
        ),
        ({"sweep": "s.yaml", "best": "maybe"}, "streams[0][1].best: must be true or false"),
        (3, "streams[0][1]: a step is a mapping (run: SPEC or sweep: SPEC) or a minimind command"),
        ("python train.py", "streams[0][1]: a step is `minimind run SPEC ...` or `minimind sweep"),
        ("minimind run", "streams[0][1]: a step is `minimind run SPEC ...`"),
        ("minimind compare x", "streams[0][1]: a step is `minimind run SPEC ...`"),
        ("minimind run 'a.yaml", "streams[0][1]: cannot be split into arguments"),
        ("minimind run a.yaml --resume", "streams[0][1]: --resume: not an option of a study's run"),
        ("minimind sweep s.yaml --variant x", "streams[0][1]: --variant: not an option of a"),
        ("minimind run a.yaml -o", "streams[0][1]: -o needs a value"),
        ("minimind run a.yaml -o seeds=[x]", "streams[0][1].seeds[0]: must be an integer"),
    ],
)
def test_a_bad_step_is_one_line_naming_its_field_path(
    tmp_path: Path, step: object, message: str
) -> None:
    with pytest.raises(SpecError) as err:
        streams_of(tmp_path, [[{"run": "ok.yaml"}, step]])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_stream_lists_at_least_one_step(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^streams\[1\]: must have at least 1 item, got 0$"):
        streams_of(tmp_path, [[{"run": "a.yaml"}], []])


@pytest.mark.parametrize(
    ("argv", "action"),
    [
        (["study", "plan", "m.yaml"], "plan"),
        (["study", "train", "m.yaml", "--dry-run", "--launcher", "slurm"], "train"),
        (["study", "bench", "m.yaml", "--rounds", "2"], "bench"),
        (["study", "report", "m.yaml", "--report-dir", "r"], "report"),
    ],
)
def test_each_study_action_is_a_subcommand(argv: list[str], action: str) -> None:
    args = build_parser().parse_args(argv)
    assert args.action == action and args.manifest == Path("m.yaml")


@pytest.mark.parametrize(
    "argv",
    [
        ["study", "m.yaml"],  # an action is required
        ["study", "m.yaml", "--plan"],  # the mode flags are gone
        ["study", "m.yaml", "--train", "--dry-run"],
        ["study", "report", "m.yaml", "--dry-run"],  # each action takes its own options only
        ["study", "bench", "m.yaml", "--launcher", "slurm"],
        ["study", "plan", "m.yaml", "--rounds", "2"],
        ["study", "train", "m.yaml", "--report-dir", "r"],
    ],
)
def test_an_option_of_another_action_is_a_usage_error(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith("usage: minimind")


def test_a_bad_manifest_exits_2_naming_the_step_in_every_action(tmp_path: Path, capsys) -> None:
    tree = yaml.safe_load(SHIPPED.read_text())
    tree["streams"][1][2] = {"sweep": "s.yaml", "bset": True}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    for action in ("plan", "train", "bench", "report"):
        assert main(["study", action, str(path)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: {path}: streams[1][2].bset: unknown key; choices: best, overrides, sweep; "
            "did you mean 'best'?\n"
        )
