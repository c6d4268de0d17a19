"""The environment a report states, read from the runs' provenance tags."""

from __future__ import annotations

import pandas as pd
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from norm_store import LN, RMS, T0, norm_curves, norm_params

from minimind.compare import compare, load_runs
from minimind.compare.environment import environment_blocks, runs_environment
from minimind.compare.report import write_report
from minimind.foundations.document import to_markdown


def test_shared_values_stand_alone_and_differing_ones_are_counted() -> None:
    runs = pd.DataFrame(
        {
            "tags.git_commit": ["abc", "abc", "abc"],
            "tags.git_dirty": ["false", "true", None],
            "tags.env.torch": ["2.13.0", "2.13.0", "2.13.0"],
            "tags.env.cpu": ["AMD EPYC", "AMD EPYC", "Intel Xeon"],
            "tags.variant": ["a", "b", "c"],
        }
    )
    assert runs_environment(runs) == {
        "git commit": "abc",
        "git tree dirty": "false (1 run); true (1 run); not recorded (1 run)",
        "cpu": "AMD EPYC (2 runs); Intel Xeon (1 run)",
        "torch": "2.13.0",
    }


def test_runs_from_before_provenance_say_not_recorded() -> None:
    runs = pd.DataFrame({"tags.variant": ["a"]})
    assert runs_environment(runs) == {
        "git commit": "not recorded",
        "git tree dirty": "not recorded",
    }
    assert runs_environment(pd.DataFrame()) == {}


def test_the_section_names_what_differs_and_the_dirty_runs() -> None:
    runs = pd.DataFrame(
        {
            "tags.git_commit": ["abc", "abc", "abc"],
            "tags.git_dirty": ["false", "true", "true"],
            "tags.env.torch": ["2.13.0", "2.13.0", "2.13.0"],
            "tags.env.cpu": ["AMD EPYC", "AMD EPYC", "Intel Xeon"],
        }
    )
    text = to_markdown(environment_blocks(runs))
    assert text.startswith("## Environment")
    assert "- **cpu**: AMD EPYC (2 runs); Intel Xeon (1 run)" in text
    assert "- **torch**: 2.13.0" in text and "- **git commit**: abc" in text
    assert "The runs differ in git tree dirty, cpu: their numbers are not bit for bit" in text
    assert "2 runs were trained from a tree with uncommitted changes" in text


def test_one_environment_is_said_to_repeat_and_none_recorded_is_no_section() -> None:
    runs = pd.DataFrame(
        {"tags.git_commit": ["abc", "abc"], "tags.env.python": ["3.11.7", "3.11.7"]}
    )
    text = to_markdown(environment_blocks(runs))
    assert "The runs agree on every item recorded" in text
    assert "No run recorded git tree dirty" in text and "differ" not in text
    assert environment_blocks(pd.DataFrame({"tags.variant": ["a", "b"]})) == []
    assert environment_blocks(pd.DataFrame()) == []


def test_the_comparison_report_has_the_environment_of_its_runs(mlflow_uri, tmp_path) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("env")
    parent = log_parent(client, exp, "env", T0)
    torch = ["2.13.0", "2.13.0", "2.12.1", "2.13.0"]
    for k, variant in enumerate((LN, RMS, LN, RMS)):
        log_child(
            client, exp, parent, variant, k // 2, T0 + 1000 * (k + 1),
            params=norm_params(variant, k // 2), metrics=norm_curves(variant, k // 2, T0),
            tags={"env.torch": torch[k], "env.numpy": "2.1.0", "git_dirty": "false"},
        )  # fmt: skip
    index = write_report(compare(load_runs(mlflow_uri, ["env"])), tmp_path, log_to_parent=False)
    text = (tmp_path / "report.md").read_text()
    section = text[text.index("## Environment") :]
    assert "- **torch**: 2.13.0 (3 runs); 2.12.1 (1 run)" in section
    assert "- **numpy**: 2.1.0" in section and "- **git tree dirty**: false" in section
    assert "The runs differ in torch" in section
    assert "2.12.1 (1 run)" in index.read_text()
