"""`ladder:` the same experiment at several model sizes: a ladder is variants over sizes.

    ladder:
      tokens_per_param: [5, 10, 20]  # or one number, or `steps:` on every rung
      rungs:
        - {name: xs, model: {dim: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}}
        - {name: s,  model: {dim: 64, n_layers: 3}}

Each rung sets model fields (or a `preset`) over the spec's `model:` section and gets its own
training budget; the rungs are crossed with the `ablate:` arms and the seeds, so a rung is one
more axis of variants (`minimind.spec.schema.Spec` expands it, `minimind.spec.variants` names
it), and everything that works on variants (run, resume, `--dry-run`, compare, a launcher) works
on a ladder.

The budget of a rung is `steps`, or `tokens_per_param` × the parameters of the rung's baseline
arm (the first ablation cell), rounded up to whole optimizer steps, so that every arm of a rung
trains on the same tokens (what the per-rung comparison pairs). Several `tokens_per_param` are
budget branches (`minimind.run.branches`, the ladder's documented default): each rung trains
once to the largest, and every smaller one decays from that run's stable phase as its own run
(`train.schedule.branches`, in the rung's steps; the schedule must be `wsd` with a set warm-up),
so that a ladder compares its arms at every size at the same few tokens per parameter for
little more than the compute of the largest budget. Comparing sizes at a fixed tokens per
parameter keeps a "trend with size" from being a trend with data starvation (a fixed number of
steps gives the small rungs many tokens per parameter and the large ones few). `params: total` counts every
parameter, embeddings included, as Chinchilla's N does (Hoffmann et al. 2022, whose "20 tokens
per parameter" is quoted against it); `non_embedding` is Kaplan et al.'s (2020) N, which leaves
out the token embedding (and an untied head): at this harness's sizes the embedding is most of a
small model, so the two ratios differ by up to several times.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from minimind.foundations.strict_config import field_error
from minimind.model.config import ModelConfig
from minimind.spec.ablation import key_problem
from minimind.spec.errors import SpecError
from minimind.spec.naming import check_name
from minimind.spec.sections import Section, TrainConfig

ParamCount = Literal["total", "non_embedding"]

# The training keys a ladder sets on every rung: its budget (its branches with several tokens
# per parameter, and its evaluation interval with `evaluations`).
BUDGET_KEYS = ("train.steps", "train.tokens")
BRANCHES_KEY = "train.schedule.branches"
EVAL_KEY = "train.eval_every"


class Rung(Section):
    """One size: model fields over the spec's `model:` section (or a `preset`), an optional
    `name` (default `r<index>`) and, without the ladder's `tokens_per_param`, its `steps`."""

    name: str | None = None
    model: dict[str, Any] = Field(min_length=1)
    steps: int | None = Field(default=None, gt=0)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str | None) -> str | None:
        return None if name is None else check_name(name)

    @field_validator("model")
    @classmethod
    def _model_keys(cls, model: dict[str, Any]) -> dict[str, Any]:
        for key in model:
            problem = key_problem(f"model.{key}")
            if problem:
                field_error((key,), problem)
        return model


class LadderConfig(Section):
    """The rungs, smallest first, and how many tokens each trains on: `tokens_per_param` × its
    parameter count (`params`: `total` or `non_embedding`; several values: budget branches),
    or each rung's own `steps`.
    `evaluations` spreads that many validation estimates over each rung's steps (null keeps
    `train.eval_every`), so every rung has a curve to read compute multipliers off."""

    rungs: list[Rung] = Field(min_length=2)
    tokens_per_param: float | list[float] | None = None
    params: ParamCount = "total"
    evaluations: int | None = Field(default=None, gt=0)

    @field_validator("tokens_per_param")
    @classmethod
    def _positive_and_distinct(
        cls, value: float | list[float] | None
    ) -> float | list[float] | None:
        values = _as_list(value)
        if isinstance(value, list) and not value:
            raise ValueError("give at least one budget")
        if any(not v > 0 for v in values) or len(set(values)) < len(values):
            raise ValueError(f"budgets must be distinct numbers > 0, got {value}")
        return value

    def budgets_per_param(self) -> list[float]:
        """The tokens-per-parameter budgets, smallest first ([] with steps on every rung)."""
        return sorted(_as_list(self.tokens_per_param))

    @model_validator(mode="after")
    def _one_budget(self) -> LadderConfig:
        for i, rung in enumerate(self.rungs):
            if self.tokens_per_param is not None and rung.steps is not None:
                field_error(
                    ("rungs", i, "steps"),
                    "the ladder's tokens_per_param sets every rung's steps; give one or the other",
                )
            if self.tokens_per_param is None and rung.steps is None:
                field_error(
                    ("rungs", i, "steps"),
                    "required: set steps on every rung, or the ladder's tokens_per_param",
                )
        names = self.names()
        for i, name in enumerate(names):
            if name in names[:i]:
                field_error(("rungs", i, "name"), f"duplicate rung name {name!r}")
        return self

    def names(self) -> list[str]:
        """Each rung's name: its own, or `r<index>`."""
        return [rung.name or f"r{i}" for i, rung in enumerate(self.rungs)]

    def model_keys(self) -> dict[str, int]:
        """Each dotted model key some rung sets -> the index of the first rung that sets it."""
        keys: dict[str, int] = {}
        for i, rung in enumerate(self.rungs):
            for key in rung.model:
                keys.setdefault(f"model.{key}", i)
        return keys

    def model_assignments(self, index: int) -> dict[str, Any]:
        """The dotted model keys rung `index` sets, with their values."""
        return {f"model.{key}": value for key, value in self.rungs[index].model.items()}

    def budget(self, index: int, baseline: ModelConfig, train: TrainConfig) -> dict[str, Any]:
        """The training keys of rung `index` whose baseline arm has the model `baseline` and
        trains with `train`: its steps (the ladder's budget alone: `train.tokens` cleared), with
        several tokens per parameter the shorter budgets as `train.schedule.branches`, and, with
        `evaluations`, its evaluation interval. Raises SpecError where two budgets round to the
        same steps."""
        steps = self.rungs[index].steps
        out: dict[str, Any] = {"train.tokens": None}
        if steps is None:
            n = parameter_count(baseline, self.params)
            per_param = self.budgets_per_param()
            found = [max(1, math.ceil(t * n / train.tokens_per_step)) for t in per_param]
            for i in range(1, len(found)):
                if found[i] == found[i - 1]:
                    raise SpecError(
                        "ladder.tokens_per_param",
                        f"{per_param[i - 1]:g} and {per_param[i]:g} tokens per parameter are both "
                        f"{found[i]} steps at rung {self.names()[index]}; space the budgets "
                        "further apart",
                    )
            steps = found[-1]
            if len(found) > 1:
                out[BRANCHES_KEY] = found[:-1]
        out["train.steps"] = steps
        if self.evaluations is not None:
            out[EVAL_KEY] = max(1, steps // self.evaluations)
        return out


def _as_list(value: float | list[float] | None) -> list[float]:
    return value if isinstance(value, list) else [] if value is None else [value]


def parameter_count(cfg: ModelConfig, count: ParamCount) -> int:
    """The N of a tokens-per-parameter budget: every parameter, or the non-embedding ones."""
    return cfg.num_params() if count == "total" else cfg.num_non_embedding_params()


def ladder_owner(ladder: LadderConfig, key: str) -> str | None:
    """Where the ladder sets the dotted `key` on every rung (`ladder.rungs[i].model`, the
    first rung that sets it, or the ladder's budget), or None when it leaves it alone."""
    for rung_key, index in ladder.model_keys().items():
        if _overlap(key, rung_key):
            return f"ladder.rungs[{index}].model"
    owned = [
        *BUDGET_KEYS,
        *([EVAL_KEY] if ladder.evaluations is not None else []),
        *([BRANCHES_KEY] if len(ladder.budgets_per_param()) > 1 else []),
    ]
    return "the ladder's budget" if any(_overlap(key, k) for k in owned) else None


def _overlap(key: str, other: str) -> bool:
    """Whether setting one dotted key changes what the other sets (equal, or one inside the
    other: `model.mlp` and `model.mlp.hidden`)."""
    return key == other or key.startswith(other + ".") or other.startswith(key + ".")
