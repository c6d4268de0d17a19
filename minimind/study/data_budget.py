"""How realistic an arm's budget is: its training tokens per parameter and the epochs of its
training split, beside every verdict of the study's report.

Training tokens are steps × tokens per step (as the axis tables give them); parameters are the
model's total (`num_params`); the training split's tokens are the run's own record of them (its
`train_split_tokens` param). A run recorded before that param existed has them read from the
prepared data it trained on: the token cache's manifest whose hash is the run's `data_manifest`
tag, under the run's `data.cache_dir`; a cache that no longer holds it (removed, or another
machine's) leaves the epochs unknown (NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from minimind.compare.table import numeric_param, tokens_per_step
from minimind.record import DATA_MANIFEST_TAG, TRAIN_SPLIT_TOKENS_PARAM


@dataclass(frozen=True)
class DataBudget:
    """One arm's training tokens per run, total parameters and training-split tokens (NaN
    where unknown)."""

    tokens: float
    params: float
    split_tokens: float

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params if self.params > 0 else math.nan

    @property
    def epochs(self) -> float:
        return self.tokens / self.split_tokens if self.split_tokens > 0 else math.nan


def tokens_per_run(runs: pd.DataFrame) -> pd.Series:
    """Training tokens of each group's runs (by `variant`): steps × tokens per step."""
    return (
        (numeric_param(runs, "train.steps") * tokens_per_step(runs))
        .groupby(runs["variant"])
        .first()
    )


def data_budgets(runs: pd.DataFrame) -> dict[str, DataBudget]:
    """Each group's (`variant`) `DataBudget`, from the first of its runs that records each."""
    from minimind.data.prepare import split_tokens  # the tokenizer library, only when read

    tokens = tokens_per_run(runs)
    params = numeric_param(runs, "num_params")
    empty = pd.Series(None, index=runs.index, dtype=object)
    caches = runs.get("params.data.cache_dir", empty)
    hashes = runs.get(f"tags.{DATA_MANIFEST_TAG}", empty)
    sources = pd.Series(list(zip(caches, hashes, strict=True)), index=runs.index)
    recorded = numeric_param(runs, TRAIN_SPLIT_TOKENS_PARAM)
    # Each prepared corpus looked up once, however many runs read it (those of runs that
    # recorded their split: none).
    counts = {
        source: split_tokens(*source)
        for source in set(sources[recorded.isna()])
        if all(isinstance(part, str) for part in source)
    }
    split = pd.to_numeric(sources.map(lambda s: counts.get(s)), errors="coerce")
    split = recorded.fillna(split)
    by_group = runs["variant"]
    params, split = params.groupby(by_group).first(), split.groupby(by_group).first()
    return {
        str(group): DataBudget(
            float(tokens.get(group, math.nan)),
            float(params.get(group, math.nan)),
            float(split.get(group, math.nan)),
        )
        for group in by_group.dropna().unique()
    }
