"""The environment a report states, read from the runs' provenance tags."""

from __future__ import annotations

import pandas as pd

from minimind.compare.environment import runs_environment


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
