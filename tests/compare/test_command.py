"""`minimind compare` on the command line: choosing runs, usage errors and exit codes."""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from norm_store import (
    RMS,
    run_cli,
)

from minimind.cli import main
from minimind.compare import (
    CompareError,
    load_runs,
    print_comparison,
)


def test_by_tag_and_all_in_cli(store, capsys) -> None:
    code, out, _ = run_cli(
        capsys, "norm", "--all", "--by", "component.norm", "--tracking-uri", store["uri"]
    )
    assert code == 0 and re.search(r"^rmsnorm\s+3 \(\+1 failed\)", out, re.M)


def test_no_experiment_means_the_latest_invocation_anywhere(store, capsys) -> None:
    code, out, _ = run_cli(capsys, "--tracking-uri", store["uri"], "--format", "csv")
    assert code == 0  # the mlp invocation started last
    assert sorted(pd.read_csv(io.StringIO(out))["variant"]) == ["model.mlp=moe", "model.mlp=swiglu"]


def test_filter_in_cli(store, capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "--filter",
        "tags.`component.mlp` = 'moe'",
        "--experiments",
        "norm,mlp",
        "--tracking-uri",
        store["uri"],
        "--format",
        "csv",
    )
    assert code == 0
    assert pd.read_csv(io.StringIO(out))["variant"].tolist() == ["model.mlp=moe"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuch"], r"unknown experiment nosuch; experiments: Default, empty, mlp, norm"),
        (["norm", "--by", "nosuch"], r"unknown --by key 'nosuch'; params: .*model\.norm.*tags: .*variant"),
        (["norm", "--baseline", "nosuch"], r"unknown --baseline 'nosuch'; variants: model\.norm="),
        (["norm", "--metric", "val/nosuch"], r"unknown --metric 'val/nosuch'; logged metrics: .*val/bpb"),
        (["norm", "--filter", "this is not a filter"], r"invalid --filter"),
        (["norm", "--power", "0"], r"--power: must be a difference > 0"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(store, capsys, argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--tracking-uri", store["uri"])
    assert code == 2 and out == ""
    assert re.search(message, err), err


def test_missing_store_is_a_usage_error(tmp_path, capsys) -> None:
    code, _, err = run_cli(capsys, "norm", "--tracking-uri", f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and "no MLflow store" in err
    assert not (tmp_path / "none.db").exists()


def test_bad_format_is_an_argparse_error(store, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["compare", "norm", "--format", "xml"])
    assert e.value.code == 2


def test_empty_experiment(store, capsys) -> None:
    code, out, err = run_cli(capsys, "empty", "--tracking-uri", store["uri"])
    assert code == 1 and out == ""
    assert "no runs" in err and "empty" in err


def test_print_comparison_for_one_invocation(store, capsys) -> None:
    print_comparison(store["uri"], "norm", parent_run_id=store["old_parent"])
    out = capsys.readouterr().out
    assert "model.norm=oldvariant" in out and RMS not in out
    print_comparison(store["uri"], "nosuch")
    assert "unknown experiment" in capsys.readouterr().err


def test_compare_error_carries_exit_code() -> None:
    assert CompareError("x").exit_code == 2 and CompareError("x", 1).exit_code == 1


def test_a_filter_that_matches_nothing_says_so(store, capsys) -> None:
    filter_string = "tags.`component.mlp` = 'nosuch'"
    code, out, err = run_cli(
        capsys, "norm", "--filter", filter_string, "--tracking-uri", store["uri"]
    )
    assert code == 1 and out == ""
    assert "no run matched the filter" in err and "holds no runs" not in err


@pytest.mark.parametrize(
    "chosen",
    [
        ["--all", "--spec-hash", "1111"],
        ["--filter", "tags.variant = 'a'", "--spec-hash", "1111"],
        ["--parent", "abc", "--all"],
        ["--parent", "abc", "--filter", "tags.variant = 'a'"],
        ["--all", "--filter", "tags.variant = 'a'"],
    ],
)
def test_the_ways_of_choosing_runs_exclude_one_another(store, capsys, chosen) -> None:
    """Given together, one of them used to be ignored without a word."""
    with pytest.raises(SystemExit) as e:
        main(["compare", "norm", *chosen, "--tracking-uri", store["uri"]])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(CompareError, match="choose the runs in different ways"):
        load_runs(
            store["uri"],
            ["norm"],
            all_runs="--all" in chosen,
            filter_string="tags.variant = 'a'" if "--filter" in chosen else "",
            parent_run_id="abc" if "--parent" in chosen else None,
            spec_hash="1111" if "--spec-hash" in chosen else None,
        )


def test_bad_tracking_uri_and_report_dir_are_one_line_exit_2_and_write_nothing(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    cases = [
        (["--tracking-uri", "foo://bar"], "--tracking-uri: MLflow has no tracking store"),
        (["--tracking-uri", f"sqlite:///{notes}"], f"--tracking-uri: {notes} is not an SQLite"),
        (["--report", "--report-dir", str(notes)], f"--report-dir: {notes} is not a directory"),
    ]
    for options, expected in cases:
        assert main(["compare", "quickstart", *options]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {expected}") and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert notes.read_text() == "not a database\n"


def test_the_extrapolation_default_is_the_shared_one(monkeypatch) -> None:
    """`--extrapolate`'s default is the one `compare_ladder` and a study's ladders use."""
    from minimind.cli import build_parser
    from minimind.compare.ladder import compare_ladder
    from minimind.foundations.extrapolation import DEFAULT_EXTRAPOLATION

    assert compare_ladder.__kwdefaults__["extrapolate_factor"] == DEFAULT_EXTRAPOLATION
    monkeypatch.setattr("minimind.commands.compare.DEFAULT_EXTRAPOLATION", 4.0)
    assert build_parser().parse_args(["compare"]).extrapolate == 4.0
