"""`ladder:` expands into variants over sizes crossed with the arms: names, budgets, errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from minimind.record import ARM_TAG, RUNG_TAG, ladder_tags
from minimind.spec import SpecError, expand, load_spec, spec_hash, validate_spec
from minimind.training.optim import decay_start_step

RUNGS = [
    {"name": "s", "model": {"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2}},
    {"model": {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2}},
]


def _tree(**ladder: Any) -> dict[str, Any]:
    return {
        "name": "lad",
        "train": {"batch_size": 4, "seq_len": 32},
        "ablate": {"model.attention": ["gqa", "mqa"]},
        "ladder": {"rungs": RUNGS, "tokens_per_param": 2.0, **ladder},
    }


def test_a_ladder_is_the_arms_at_each_rung_with_budgets_from_the_baselines_parameters() -> None:
    spec = validate_spec(_tree())
    variants = expand(spec)
    assert [v.name for v in variants] == [
        "rung=s,attention=gqa",
        "rung=s,attention=mqa",
        "rung=r1,attention=gqa",
        "rung=r1,attention=mqa",
    ]
    assert [(v.rung, v.arm) for v in variants] == [
        ("s", "attention=gqa"),
        ("s", "attention=mqa"),
        ("r1", "attention=gqa"),
        ("r1", "attention=mqa"),
    ]
    for rung, (gqa, mqa) in zip(RUNGS, [variants[:2], variants[2:]], strict=True):
        cfg = gqa.spec.model_config_obj()
        assert (cfg.dim, cfg.n_layers) == (rung["model"]["dim"], rung["model"]["n_layers"])
        assert mqa.spec.model_config_obj().num_params() < cfg.num_params()  # fewer kv heads
        # Both arms train on 2 tokens per parameter of the rung's baseline arm (gqa).
        steps = math.ceil(2.0 * cfg.num_params() / (4 * 32))
        assert gqa.spec.train.steps == mqa.spec.train.steps == steps
        assert gqa.spec.train.tokens is None
        assert gqa.spec.ladder is None and not gqa.spec.ablate  # a child trains one cell
    assert variants[0].spec.train.steps < variants[2].spec.train.steps


def test_the_budget_counts_non_embedding_parameters_when_asked() -> None:
    (total, _, _, _), (body, _, _, _) = (
        expand(validate_spec(_tree(params=count))) for count in ("total", "non_embedding")
    )
    cfg = total.spec.model_config_obj()
    assert total.spec.train.steps == math.ceil(2.0 * cfg.num_params() / 128)
    assert body.spec.train.steps == math.ceil(2.0 * cfg.num_non_embedding_params() / 128)


def test_explicit_steps_and_evaluations_per_rung() -> None:
    rungs = [{**RUNGS[0], "steps": 40}, {**RUNGS[1], "steps": 90}]
    spec = validate_spec(_tree(rungs=rungs, tokens_per_param=None, evaluations=4))
    steps = [(v.spec.train.steps, v.spec.train.eval_every) for v in expand(spec)]
    assert steps == [(40, 10), (40, 10), (90, 22), (90, 22)]


def test_a_ladder_without_arms_is_one_variant_per_rung_named_by_its_rung() -> None:
    tree = _tree()
    del tree["ablate"]
    variants = expand(validate_spec(tree))
    assert [(v.name, v.rung, v.arm) for v in variants] == [
        ("rung=s", "s", "base"),
        ("rung=r1", "r1", "base"),
    ]


def test_match_resizes_within_each_rung_to_that_rungs_baseline() -> None:
    tree = _tree()
    tree["ablate"] = {"model.mlp": ["swiglu", "relu"]}
    tree["match"] = {"knob": "model.mlp.hidden", "tolerance": 0.02}
    variants = expand(validate_spec(tree))
    for base, other in (variants[:2], variants[2:]):
        a, b = (v.spec.model_config_obj().num_params() for v in (base, other))
        assert abs(a - b) <= 0.02 * a
    assert (
        variants[0].spec.model_config_obj().num_params()
        < variants[2].spec.model_config_obj().num_params()
    )


def test_ladder_tags_name_the_rung_and_the_arm() -> None:
    assert ladder_tags("s", "attention=mqa") == {RUNG_TAG: "s", ARM_TAG: "attention=mqa"}
    assert ladder_tags(None, None) == {}


def test_the_ladder_is_part_of_the_hash_and_a_spec_without_one_keeps_its_hash() -> None:
    with_ladder = validate_spec(_tree())
    other = validate_spec(_tree(tokens_per_param=3.0))
    assert spec_hash(with_ladder) != spec_hash(other)
    plain = {k: v for k, v in _tree().items() if k != "ladder"}
    assert spec_hash(validate_spec(plain)) == spec_hash(validate_spec({**plain, "ladder": None}))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"ladder": {"rungs": RUNGS}},
            "ladder.rungs[0].steps: required: set steps on every rung, or the ladder's",
        ),
        (
            {"ladder": {"rungs": [{**RUNGS[0], "steps": 3}, RUNGS[1]], "tokens_per_param": 1}},
            "ladder.rungs[0].steps: the ladder's tokens_per_param sets every rung's steps",
        ),
        ({"ladder": {"rungs": RUNGS[:1], "tokens_per_param": 1}}, "ladder.rungs: "),
        (
            {"ladder": {"rungs": [RUNGS[0], {**RUNGS[1], "name": "s"}], "tokens_per_param": 1}},
            "ladder.rungs[1].name: duplicate rung name 's'",
        ),
        (
            {"ladder": {"rungs": [RUNGS[0], {"model": {"dimm": 8}}], "tokens_per_param": 1}},
            "ladder.rungs[1].model.dimm: unknown key 'dimm'",
        ),
        (
            {"ladder": {"rungs": [RUNGS[0], {"model": {"dim": 0}}], "tokens_per_param": 1}},
            "ladder.rungs[1].model.dim: must be > 0",
        ),
        (
            {"ladder": {"rungs": [RUNGS[0], {"name": "a/b", "model": {"dim": 8}}], "steps": 1}},
            "ladder.rungs[1].name: must be",
        ),
        (
            {"ablate": {"model.dim": [32, 64]}},
            "ablate.model.dim: model.dim is set on every rung by ladder.rungs[0].model",
        ),
        (
            {"ablate": {"arm": [{"train.steps": 5}, {"train.steps": 9}]}},
            "ablate.arm: train.steps is set on every rung by the ladder's budget",
        ),
        (
            # A context shorter than train.seq_len: named at the arm, and at the first rung.
            {"ablate": {"model.max_seq_len": [256, 16]}},
            "ablate.model.max_seq_len[1]: at ladder rung s: train.seq_len: must be <= model.max",
        ),
        (
            # A warm-up that fits the spec's own 10000 steps, not the first rung's ~1200.
            {
                "train": {
                    "batch_size": 4,
                    "seq_len": 32,
                    "steps": 10000,
                    "schedule": {"warmup": 2000},
                }
            },
            "ladder.rungs[0]: train.schedule.warmup: must be < train.steps",
        ),
        (
            {
                "sweep": {
                    "params": {"train.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-2}}
                }
            },
            "sweep: not with a ladder",
        ),
    ],
)
def test_a_bad_ladder_is_one_line_naming_the_field(change: dict, expected: str) -> None:
    tree = {**_tree(), **change}
    if "ablate" in change and not change["ablate"].get("model.attention"):
        tree["ablate"] = change["ablate"]
    with pytest.raises(SpecError) as info:
        validate_spec(tree)
    assert str(info.value).startswith(expected), str(info.value)
    assert "\n" not in str(info.value)


def test_an_override_of_what_the_ladder_sets_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(_tree()))
    assert load_spec(path, ["train.optimizer.lr=1e-3"]).train.optimizer.lr == 1e-3
    for key, owner in (("model.dim=16", "ladder.rungs[0].model"), ("train.steps=5", "budget")):
        with pytest.raises(SpecError) as info:
            load_spec(path, [key])
        assert str(info.value).startswith(f"{key.split('=')[0]}: is set on every rung by ")
        assert owner in str(info.value)


def test_the_dry_run_lists_every_rung_and_its_budget(tmp_path: Path) -> None:
    from minimind.run.plan import describe_plan, plan_run

    tree = _tree()
    tree["tracking"] = {"uri": f"sqlite:///{tmp_path}/m.db"}
    tree["train"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    text = describe_plan(plan_run(validate_spec(tree)))
    for name in ("rung=s,attention=gqa", "rung=r1,attention=mqa"):
        assert name in text
    assert "2 tokens per parameter of its first arm (every parameter)" in text


def test_the_dry_run_says_a_ladder_below_3_rungs_gets_no_fit(tmp_path: Path) -> None:
    from minimind.run.plan import describe_plan, plan_run

    def text(rungs: list[dict[str, Any]]) -> str:
        tree = _tree()
        tree["ladder"]["rungs"] = rungs
        tree["tracking"] = {"uri": f"sqlite:///{tmp_path}/m.db"}
        return describe_plan(plan_run(validate_spec(tree)))

    assert "note: 2 rungs: compare fits no power law below 3 rungs" in text(RUNGS)
    third = {"model": {"dim": 96, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2}}
    assert "no power law" not in text([*RUNGS, third])


def _branched(**ladder: Any) -> dict[str, Any]:
    tree = _tree(**{"tokens_per_param": [1, 2, 4], **ladder})
    tree["train"]["schedule"] = {"name": "wsd", "warmup": 5}
    return tree


def test_several_tokens_per_param_are_each_rungs_budget_branches() -> None:
    variants = expand(validate_spec(_branched(evaluations=4)))
    for rung in (variants[:2], variants[2:]):
        n = rung[0].spec.model_config_obj().num_params()
        want = [math.ceil(t * n / (4 * 32)) for t in (1, 2, 4)]
        for v in rung:  # every arm of a rung at the baseline arm's budgets
            assert v.spec.train.steps == want[-1]
            assert v.spec.train.schedule.branches == want[:-1]
            assert v.spec.train.eval_every == want[-1] // 4
    assert variants[0].spec.train.steps < variants[2].spec.train.steps


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (
            _tree(tokens_per_param=[1, 2]),
            "ladder.tokens_per_param: several budgets are budget "
            "branches of one wsd run: set train.schedule to {name: wsd, warmup: <steps>} (it is cosine",
        ),  # fmt: skip
        (_tree(tokens_per_param=[1, 1]), "ladder.tokens_per_param: budgets must be distinct"),
        (
            _tree(tokens_per_param=[1, 0]),
            "ladder.tokens_per_param: budgets must be distinct numbers > 0",
        ),  # fmt: skip
        (_tree(tokens_per_param=[]), "ladder.tokens_per_param: give at least one budget"),
        (
            _branched(tokens_per_param=[1, 1.00001]),
            "ladder.tokens_per_param: 1 and 1.00001 tokens per parameter are both",
        ),  # fmt: skip
    ],
)
def test_bad_budgets_per_param_are_one_line_naming_the_field(
    tree: dict[str, Any], expected: str
) -> None:
    with pytest.raises(SpecError) as info:
        validate_spec(tree)
    assert str(info.value).startswith(expected), str(info.value)


def test_the_ladders_branches_are_its_own_with_several_budgets() -> None:
    tree = _branched()
    tree["train"]["schedule"]["branches"] = [10]
    with pytest.raises(
        SpecError, match=r"^train\.schedule\.branches: the ladder's tokens_per_param"
    ):
        validate_spec(tree)
    one = _tree(tokens_per_param=2.0)  # one budget: branches in steps stay the spec's
    one["train"]["schedule"] = {"name": "wsd", "warmup": 5, "branches": [20]}
    assert all(v.spec.train.schedule.branches == [20] for v in expand(validate_spec(one)))


def test_an_override_of_the_ladders_branches_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(_branched()))
    with pytest.raises(SpecError) as info:
        load_spec(path, ["train.schedule.branches=[7]"])
    message = str(info.value)
    assert message.startswith("train.schedule.branches: the ladder's tokens_per_param sets each")
    assert message.endswith("(from -o train.schedule.branches=[7])")
    tree = _branched()
    tree["ablate"] = {"arm": [{"train.schedule.branches": [7]}, {"train.schedule.branches": [9]}]}
    with pytest.raises(SpecError, match=r"^ablate\.arm: train\.schedule\.branches is set on every rung by the ladder's budget"):  # fmt: skip
        validate_spec(tree)
    # an arm that sets the whole schedule would drop the branches: refused too
    tree["ablate"] = {"arm": [{"model.attention": "gqa"}, {"train.schedule": {"name": "cosine"}}]}
    with pytest.raises(SpecError, match=r"^ablate\.arm: train\.schedule is set on every rung by the ladder's budget"):  # fmt: skip
        validate_spec(tree)


def test_the_dry_run_states_the_budgets_and_the_compute_branches_save(tmp_path: Path) -> None:
    from minimind.run.plan import describe_plan, plan_run

    tree = _branched()
    tree["tracking"] = {"uri": f"sqlite:///{tmp_path}/m.db"}
    tree["train"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    spec = validate_spec(tree)
    text = describe_plan(plan_run(spec))
    assert "each training on 4 tokens per parameter of its first arm (every parameter) (budget branches at 1, 2)" in text  # fmt: skip
    lines = [line for line in text.splitlines() if line.startswith("budget branches: ")]
    assert len(lines) == 2  # a rung each, 2 arms x 1 seed per rung
    assert "= 4 run(s) (12 runs: every budget a run)" in text
    assert all(line.endswith("tokens over 2 run(s)") for line in lines)
    # The total, recomputed from the variants: every budget as its own run against the trunk
    # and the branches' decays.
    separate = branched = 0
    for v in expand(spec):
        train = v.spec.train
        schedule = train.resolved_schedule
        shorter = train.schedule.branches
        runs_tokens = train.tokens_per_step * len(spec.seeds)
        separate += (sum(shorter) + train.steps) * runs_tokens
        decays = sum(b - decay_start_step(b, schedule) for b in shorter)
        branched += (train.steps + decays) * runs_tokens
    saved = separate - branched
    assert f"budget branches in all: {saved:,} of {separate:,} training tokens saved" in text
