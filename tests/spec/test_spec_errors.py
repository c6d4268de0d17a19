"""Malformed specs and overrides: each is a one-line `SpecError` that names the field path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from minimind.spec import SpecError, load_spec

# (id, spec text, overrides, expected start of str(err)); "{spec}" stands for the spec's path.
CASES: list[tuple[str, str, list[str], str]] = [
    ("yaml-syntax", "name: x\ntrain: [1,\n", [], "{spec}: invalid YAML"),
    ("not-a-mapping", "- name: x\n", [], "{spec}: must be a mapping"),
    (
        "lr-infinite",
        "name: x\ntrain: {optimizer: {lr: .inf}}\n",
        [],
        "train.optimizer.lr: must be a finite number",
    ),
    (
        "time-limit-infinite",
        "name: x\ntrain: {time_limit: .inf}\n",
        [],
        "train.time_limit: must be a finite number",
    ),
    (
        "eps-nan",
        "name: x\ntrain: {optimizer: {eps: .nan}}\n",
        [],
        "train.optimizer.eps: option 'eps' of optimizer 'adamw' must be float > 0, got nan"
        " (Input should be a finite number)",
    ),
    (
        "steps-boolean",
        "name: x\ntrain: {steps: true}\n",
        [],
        "train.steps: must be a number, not true",
    ),
    ("dim-boolean", "name: x\nmodel: {dim: true}\n", [], "model.dim: must be a number, not true"),
    ("seed-boolean", "name: x\nseeds: [true]\n", [], "seeds[0]: must be a number, not true"),
    (
        "seed-boolean-override",
        "name: x\n",
        ["seeds=[0, false]"],
        "seeds[1]: must be a number, not false",
    ),
    (
        "rung-size-boolean",
        "name: x\nladder: {rungs: [{steps: 3, model: {dim: 32}}, {steps: true, model: {dim: 64}}]}\n",
        [],
        "ladder.rungs[1].steps: must be a number, not true",
    ),
    (
        "steps-boolean-override",
        "name: x\n",
        ["train.steps=false"],
        "train.steps: must be a number, not false",
    ),
    (
        "duplicate-section",
        "name: x\ntrain: {steps: 5}\ntrain: {steps: 9}\n",
        [],
        "train: duplicate key (lines 2 and 3)",
    ),
    (
        "duplicate-nested-key",
        "name: x\ntrain:\n  steps: 5\n  steps: 9\n",
        [],
        "train.steps: duplicate key (lines 3 and 4)",
    ),
    ("missing-name", "description: hi\n", [], "name: required"),
    ("unsafe-name", "name: 'my run/1'\n", [], "name: must be"),
    ("unknown-section", "name: x\ntrian: {steps: 5}\n", [], "trian: unknown key"),
    ("unknown-train-key", "name: x\ntrain: {stpes: 5}\n", [], "train.stpes: unknown key"),
    (
        "lr-not-positive",
        "name: x\ntrain: {optimizer: {lr: -0.001}}\n",
        [],
        "train.optimizer.lr: must be > 0",
    ),
    (
        "lr-not-a-number",
        "name: x\ntrain: {optimizer: {lr: fast}}\n",
        [],
        "train.optimizer.lr: must be a number",
    ),
    (
        "beta-out-of-range",
        "name: x\ntrain: {optimizer: {betas: [0.9, 1.5]}}\n",
        [],
        "train.optimizer.betas: option 'betas' of optimizer 'adamw' must be tuple",
    ),
    (
        "betas-too-short",
        "name: x\ntrain: {optimizer: {betas: [0.9]}}\n",
        [],
        "train.optimizer.betas: option 'betas' of optimizer 'adamw' must be tuple",
    ),
    (
        "unknown-optimizer",
        "name: x\ntrain: {optimizer: {name: adamx}}\n",
        [],
        "train.optimizer.name: unknown optimizer 'adamx'; choices: adamw, muon, sgd; "
        "did you mean 'adamw'?",
    ),
    (
        "unknown-schedule",
        "name: x\ntrain: {schedule: {name: cosin}}\n",
        [],
        "train.schedule.name: unknown value 'cosin'; choices: cosine, linear, constant, wsd; "
        "did you mean 'cosine'?",
    ),
    (
        "warmup-not-below-steps",
        "name: x\ntrain: {steps: 20, schedule: {warmup: 20}}\n",
        [],
        "train.schedule.warmup: must be < train.steps (20)",
    ),
    ("no-budget", "name: x\ntrain: {steps: null}\n", [], "train.steps: set at least one"),
    (
        "seq-len-over-model",
        "name: x\ntrain: {seq_len: 512}\n",
        [],
        "train.seq_len: must be <= model.max_seq_len (256)",
    ),
    ("unknown-precision", "name: x\ntrain: {precision: fp16}\n", [], "train.precision: unknown"),
    ("unknown-device", "name: x\ntrain: {device: gpu}\n", [], "train.device: unknown value"),
    ("zero-batch", "name: x\ntrain: {batch_size: 0}\n", [], "train.batch_size: must be > 0"),
    (
        "fractional-batch",
        "name: x\ntrain: {batch_size: 1.5}\n",
        [],
        "train.batch_size: must be an integer",
    ),
    ("negative-time-limit", "name: x\ntrain: {time_limit: -5}\n", [], "train.time_limit: must be"),
    (
        "unknown-mlp",
        "name: x\nmodel: {mlp: swiglo}\n",
        [],
        "model.mlp: unknown mlp 'swiglo'; choices: gelu, moe, relu, relu2, swiglu; did you mean 'swiglu'?",
    ),
    (
        "unknown-model-field",
        "name: x\nmodel: {dimm: 64}\n",
        [],
        "model.dimm: unknown key; choices:",
    ),
    (
        "unknown-preset",
        "name: x\nmodel: {preset: tinyy}\n",
        [],
        "model.preset: unknown preset 'tinyy'",
    ),
    (
        "unknown-component-option",
        "name: x\nmodel: {norm: {name: rmsnorm, epz: 1.0e-6}}\n",
        [],
        "model.norm: unknown option 'epz'",
    ),
    (
        "heads-do-not-divide-dim",
        "name: x\nmodel: {dim: 66}\n",
        [],
        "model.dim: dim (66) must be divisible by n_heads (4)",
    ),
    (
        "pad-vocab-multiple-zero",
        "name: x\nmodel: {pad_vocab_multiple: 0}\n",
        [],
        "model.pad_vocab_multiple: must be >= 1, got 0",
    ),
    (
        "pad-vocab-multiple-override",
        "name: x\n",
        ["model.pad_vocab_multiple=-64"],
        "model.pad_vocab_multiple: must be >= 1, got -64",
    ),
    (
        "model-vocab-below-tokenizer",
        "name: x\ndata: {tokenizer: {vocab_size: 4096}}\n",
        [],
        "model.vocab_size: must be >= data.tokenizer.vocab_size (4096)",
    ),
    (
        "missing-corpus",
        "name: x\ndata: {corpus: no/such/corpus.txt}\n",
        [],
        "data.corpus: corpus file not found",
    ),
    (
        "tiny-tokenizer-vocab",
        "name: x\ndata: {tokenizer: {vocab_size: 10}}\n",
        [],
        "data.tokenizer.vocab_size: must be >= 259",
    ),
    ("val-fraction", "name: x\ndata: {val_fraction: 0.9}\n", [], "data.val_fraction: must be <="),
    ("no-seeds", "name: x\nseeds: []\n", [], "seeds: must have at least 1 item"),
    ("duplicate-seed", "name: x\nseeds: [0, 1, 0]\n", [], "seeds[2]: duplicate seed 0"),
    ("negative-seed", "name: x\nseeds: [-1]\n", [], "seeds[0]: must be >= 0"),
    ("seed-past-numpy", "name: x\nseeds: [10000000000]\n", [], "seeds[0]: must be <= 4294967295"),
    (
        "data-seed-past-numpy",
        "name: x\ntrain: {data_seed: 4294967296}\n",
        [],
        "train.data_seed: must be <= 4294967295",
    ),
    (
        "experiment-absolute-path",
        "name: x\n",
        ["tracking.experiment=/abs/x"],
        "tracking.experiment: must be 1-100 letters",
    ),
    (
        "experiment-escaping-path",
        "name: x\ntracking: {experiment: ../x/y}\n",
        [],
        "tracking.experiment: must be 1-100 letters",
    ),
    ("experiment-dot-dot", "name: x\ntracking: {experiment: ..}\n", [], "tracking.experiment:"),
    (
        "duplicate-key-in-override-mapping",
        "name: x\n",
        ["train.optimizer={name: adamw, lr: 0.1, lr: 0.002}"],
        "train.optimizer.lr: duplicate key in -o train.optimizer=",
    ),
    ("seeds-not-a-list", "name: x\nseeds: 3\n", [], "seeds: must be a list"),
    (
        "ablate-outside-sections",
        "name: x\nablate: {tracking.uri: [a, b]}\n",
        [],
        "ablate.tracking.uri: can only vary keys under model, data or train",
    ),
    (
        "ablate-unknown-key",
        "name: x\nablate: {train.stpes: [1, 2]}\n",
        [],
        "ablate.train.stpes: unknown key 'stpes'",
    ),
    (
        "ablate-bad-value",
        "name: x\nablate: {model.norm: [rmsnorm, layrnorm]}\n",
        [],
        "ablate.model.norm[1]: unknown norm 'layrnorm'",
    ),
    (
        "ablate-bad-option",
        "name: x\nablate: {model.mlp: [relu, {name: moe, top_k: 9}]}\n",
        [],
        "ablate.model.mlp[1]:",
    ),
    (
        "ablate-empty-axis",
        "name: x\nablate: {model.norm: []}\n",
        [],
        "ablate.model.norm: must have at least 1 item",
    ),
    (
        "ablate-duplicate-value",
        "name: x\nablate: {model.norm: [rmsnorm, rmsnorm]}\n",
        [],
        "ablate.model.norm[1]: duplicate value 'rmsnorm'",
    ),
    (
        "ablate-cross-field",
        "name: x\nablate: {train.seq_len: [128, 512]}\n",
        [],
        "ablate.train.seq_len[1]: must be <= model.max_seq_len",
    ),
    (
        "ablate-bad-combination",
        "name: x\nablate: {train.seq_len: [128, 256], model.max_seq_len: [256, 128]}\n",
        [],
        "ablate: variant seq_len=256,max_seq_len=128: train.seq_len: must be <=",
    ),
    (
        "ablate-group-not-mapping",
        "name: x\nablate: {arch: [rmsnorm]}\n",
        [],
        "ablate.arch[0]: a group axis takes mappings",
    ),
    (
        "ablate-group-bad-value",
        "name: x\nablate: {arch: [{model.norm: rmsnorm}, {model.norm: lnorm}]}\n",
        [],
        "ablate.arch[1].model.norm: unknown norm 'lnorm'",
    ),
    (
        "ablate-key-twice",
        "name: x\nablate: {model.norm: [rmsnorm], arch: [{model.norm: a}]}\n",
        [],
        "ablate.arch: model.norm is also varied by ablate.model.norm",
    ),
    (
        "tracking-unknown-key",
        "name: x\ntracking: {url: http://x}\n",
        [],
        "tracking.url: unknown key; choices: experiment, uri; did you mean 'uri'?",
    ),
    (
        "plugin-not-found",
        "name: x\nplugins: [no_such_plugin_module_xyz]\n",
        [],
        "plugins[0]: cannot load plugin 'no_such_plugin_module_xyz'",
    ),
    (
        "sweep-multi-objective-pruned",
        "name: x\nsweep:\n  objective: [{metric: val/bpb}, {metric: perf/tokens_per_s, "
        "direction: maximize}]\n  pruner: {name: median}\n",
        [],
        "sweep.pruner: a multi-objective study cannot be pruned",
    ),
    (
        "match-tolerance-boolean",
        "name: x\nablate: {model.mlp: [swiglu, relu2]}\n"
        "match: {knob: model.mlp.hidden, tolerance: true}\n",
        [],
        "match.tolerance: must be a number, not true",
    ),
    (
        "sweep-direction-contradicts-the-metric",
        "name: x\nsweep: {objective: perf/tokens_per_s, direction: minimize}\n",
        [],
        "sweep.direction: perf/tokens_per_s is better higher: its direction is maximize, "
        "not minimize",
    ),
    (
        "sweep-objective-direction-contradicts-the-metric",
        "name: x\nsweep:\n  objective: [{metric: val/bpb, direction: maximize}]\n",
        [],
        "sweep.objective[0].direction: val/bpb is better lower: its direction is minimize",
    ),
    (
        "sweep-direction-contradicts-the-default-objective",
        "name: x\nsweep: {direction: maximize}\n",
        [],
        "sweep.direction: val/bpb is better lower",
    ),
    (
        "sweep-unknown-metric",
        "name: x\nsweep: {objective: val/bpd}\n",
        [],
        "sweep.objective[0].metric: unknown metric 'val/bpd'",
    ),
    (
        "sweep-unknown-sampler",
        "name: x\nsweep: {sampler: {name: tpee}}\n",
        [],
        "sweep.sampler.name: unknown value 'tpee'",
    ),
    (
        "sweep-bad-storage",
        "name: x\nsweep: {storage: results/optuna.db}\n",
        [],
        "sweep.storage: must be journal:PATH or a database URL",
    ),
    ("sweep-zero-workers", "name: x\nsweep: {workers: 0}\n", [], "sweep.workers: must be > 0"),
    (
        "sweep-low-above-high",
        "name: x\nsweep:\n  params:\n    train.optimizer.lr: {type: float, low: 0.1, high: 0.01}\n",
        [],
        "sweep.params.train.optimizer.lr.high: must be >= low",
    ),
    (
        "sweep-log-from-zero",
        "name: x\nsweep:\n  params:\n    train.optimizer.lr: {type: float, low: 0, high: 0.1, "
        "log: true}\n",
        [],
        "sweep.params.train.optimizer.lr.low: must be > 0 when log",
    ),
    (
        "sweep-categorical-with-range",
        "name: x\nsweep:\n  params:\n    model.mlp: {type: categorical, low: 1, choices: [relu]}\n",
        [],
        "sweep.params.model.mlp.low: not allowed for a categorical param",
    ),
    (
        "sweep-bad-choice",
        "name: x\nsweep:\n  params:\n    model.mlp: {type: categorical, choices: [relu, swiglo]}\n",
        [],
        "sweep.params.model.mlp.choices[1]: unknown mlp 'swiglo'",
    ),
    (
        "sweep-unknown-param",
        "name: x\nsweep:\n  params:\n    train.optimizer.lrr: {type: float, low: 0.1, high: 1}\n",
        [],
        "sweep.params.train.optimizer.lrr.low: unknown option 'lrr' for optimizer 'adamw'; "
        "valid options: betas, eps",
    ),
    (
        "sweep-misspelt-optimizer-option",
        "name: x\ntrain: {optimizer: {name: muon}}\nsweep:\n  params:\n"
        "    train.optimizer.adamw_lrr: {type: float, low: 0.001, high: 0.01}\n",
        [],
        "sweep.params.train.optimizer.adamw_lrr.low: unknown option 'adamw_lrr' for optimizer "
        "'muon'; valid options: momentum, nesterov, ns_steps, adamw_lr, betas, eps; did you mean "
        "'adamw_lr'?",
    ),
    (
        "sweep-range-end-invalid",
        "name: x\nsweep:\n  params:\n    train.optimizer.lr: {type: float, low: -1, high: 1}\n",
        [],
        "sweep.params.train.optimizer.lr.low: must be > 0",
    ),
    (
        "sweep-int-fraction",
        "name: x\nsweep:\n  params:\n    train.batch_size: {type: int, low: 1.5, high: 8}\n",
        [],
        "sweep.params.train.batch_size.low: must be an integer",
    ),
    (
        "sweep-grid-continuous",
        "name: x\nsweep:\n  sampler: grid\n  params:\n    train.optimizer.lr: {type: float, "
        "low: 0.001, high: 0.01}\n",
        [],
        "sweep.sampler: grid needs a finite space",
    ),
    (
        "sweep-low-not-a-number",
        "name: x\nsweep:\n  params:\n    train.steps: {type: int, low: abc, high: 5}\n",
        [],
        "sweep.params.train.steps.low: must be int or float, got 'abc'",
    ),
    (
        "sweep-choice-not-scalar",
        "name: x\nsweep:\n  params:\n    model.mlp: {type: categorical, choices: [{name: moe}]}\n",
        [],
        "sweep.params.model.mlp.choices[0]: must be bool, int, float or str",
    ),
    (
        "ablate-not-a-list",
        "name: x\nablate: {model.norm: rmsnorm}\n",
        [],
        "ablate.model.norm: must be a list, got 'rmsnorm'",
    ),
    (
        "empty-experiment",
        "name: x\ntracking: {experiment: ''}\n",
        [],
        "tracking.experiment: must be a non-empty string",
    ),
    ("override-without-value", "name: x\n", ["train.steps"], "train.steps: an override must"),
    ("override-without-key", "name: x\n", ["=5"], "-o: an override needs a key"),
    ("override-bad-key", "name: x\n", ["train..steps=5"], "train..steps: not a dotted key"),
    ("override-unknown-key", "name: x\n", ["train.stpes=5"], "train.stpes: unknown key"),
    (
        "override-bad-value",
        "name: x\n",
        ["train.optimizer.lr=-1"],
        "train.optimizer.lr: must be > 0, got -1 (from -o train.optimizer.lr=-1)",
    ),
    ("override-unparsable", "name: x\n", ["train.steps=[1,"], "train.steps: cannot parse"),
    (
        "override-into-scalar",
        "name: x\ntrain: {steps: 30}\n",
        ["train.steps.max=1"],
        "train.steps: is 30, not a mapping",
    ),
    (
        "override-ablated-key",
        "name: x\nablate: {model.norm: [rmsnorm, layernorm]}\n",
        ["model.norm=layernorm"],
        "model.norm: is varied by ablate.model.norm",
    ),
    ("override-extends", "name: x\n", ["extends=other.yaml"], "extends: cannot be overridden"),
    (
        "mup-without-base-width",
        "name: x\nmodel: {parametrization: mup}\n",
        [],
        "model.parametrization.base_width: mup needs base_width",
    ),
    (
        "standard-with-base-width",
        "name: x\nmodel: {parametrization: {name: standard, base_width: 64}}\n",
        [],
        "model.parametrization.base_width: is a setting of mup",
    ),
    (
        "mup-unknown-name",
        "name: x\nmodel: {parametrization: {name: mu, base_width: 64}}\n",
        [],
        "model.parametrization.name: ",
    ),
    (
        "mup-zero-embedding-lr",
        "name: x\nmodel: {parametrization: {name: mup, base_width: 64, embedding_lr_mult: 0}}\n",
        [],
        "model.parametrization.embedding_lr_mult: ",
    ),
    (
        "mup-with-sgd",
        "name: x\nmodel: {parametrization: {name: mup, base_width: 64}}\n"
        "train: {optimizer: {name: sgd}}\n",
        [],
        "train.optimizer.name: model.parametrization mup is defined for adamw, muon, not 'sgd'",
    ),
]


@pytest.mark.parametrize(
    ("text", "overrides", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_spec_names_its_field(
    tmp_path: Path, text: str, overrides: list[str], expected: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(spec, overrides)
    message = str(info.value)
    assert message.startswith(expected.format(spec=spec)), message
    assert "\n" not in message
    assert message.startswith(info.value.path + ": ")


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r": file not found$") as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.path == str(tmp_path / "nope.yaml")


def test_missing_parent_file(tmp_path: Path) -> None:
    spec = write(tmp_path, "child.yaml", "extends: base.yaml\nname: x\n")
    with pytest.raises(SpecError, match=r"^extends: file not found: .*base\.yaml$"):
        load_spec(spec)


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "extends: b.yaml\nname: a\n")
    write(tmp_path, "b.yaml", "extends: sub/../a.yaml\nname: b\n")
    with pytest.raises(SpecError, match=r"^extends: cycle: a\.yaml -> b\.yaml -> a\.yaml$"):
        load_spec(tmp_path / "a.yaml")


def test_extends_self(tmp_path: Path) -> None:
    spec = write(tmp_path, "a.yaml", "extends: a.yaml\nname: a\n")
    with pytest.raises(SpecError, match=r"^extends: cycle: a\.yaml -> a\.yaml$"):
        load_spec(spec)


def test_syntax_error_in_parent_names_the_parent(tmp_path: Path) -> None:
    parent = write(tmp_path, "base.yaml", "seeds: [0]\ntrain: steps: 5\n")
    spec = write(tmp_path, "child.yaml", "extends: base.yaml\nname: x\n")
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert info.value.path == str(parent.resolve())
    assert "invalid YAML" in info.value.message and "line 2, column 13" in info.value.message


def test_only_the_first_problem_is_reported(tmp_path: Path) -> None:
    spec = write(tmp_path, "s.yaml", "name: x\ntrain: {batch_size: 0, seq_len: -1}\n")
    with pytest.raises(SpecError, match=r"^train\.batch_size: must be > 0, got 0$"):
        load_spec(spec)


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """Nine aliases of nine aliases, eight deep: 43 million values once expanded. Walking them
    (the duplicate-key check, then validation) would hang; the loader stops at its bound."""
    levels = "abcdefgh"
    text = "name: x\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{below}'] * 9)}]\n"
        for below, name in zip(levels, levels[1:], strict=False)
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    with pytest.raises(SpecError, match="expands past 100,000 values through its aliases"):
        load_spec(spec)
