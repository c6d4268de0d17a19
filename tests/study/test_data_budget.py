"""An arm's data budget read from its runs: the training split's tokens as the runs recorded
them, so that a report re-rendered where no token cache is (a fresh clone) still has epochs."""

from __future__ import annotations

import pandas as pd
import pytest

from minimind.study.data_budget import data_budgets


def test_the_split_tokens_are_read_from_the_runs_without_a_token_cache(tmp_path):
    runs = pd.DataFrame(
        {
            "variant": ["a", "a", "b"],
            "params.train.steps": ["10", "10", "10"],
            "params.train.batch_size": ["4", "4", "4"],
            "params.train.seq_len": ["8", "8", "8"],
            "params.num_params": ["100", "100", "100"],
            "params.train_split_tokens": ["160", "160", None],  # b: recorded before the param
            "params.data.cache_dir": [str(tmp_path / "absent")] * 3,
            "tags.data_manifest": ["0123456789abcdef"] * 3,
        }
    )
    budgets = data_budgets(runs)
    assert budgets["a"].split_tokens == 160
    assert budgets["a"].epochs == pytest.approx(320 / 160)
    assert pd.isna(budgets["b"].epochs)  # neither recorded nor in a cache here
