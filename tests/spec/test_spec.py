"""Spec loading, extends, overrides, data paths, dump round trip, expansion, flatten and hash."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minimind.data.config import DataConfig
from minimind.model.config import ModelConfig
from minimind.spec import (
    Objective,
    Spec,
    SpecError,
    SweepConfig,
    dump_spec,
    expand,
    flatten,
    load_spec,
    spec_hash,
    validate_spec,
    with_values,
)
from minimind.spec.schema import apply
from tests.conftest import shipped_specs

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
SAFE_NAME = re.compile(r"[A-Za-z0-9_.=,()+\-\[\]]+")


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_name_is_enough(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "s.yaml", "name: minimal\n"))
    assert spec.model_config_obj() == ModelConfig.preset("tiny")
    assert spec.data == DataConfig()
    assert (spec.train.steps, spec.train.batch_size, spec.train.device) == (300, 16, "auto")
    assert spec.seeds == [0] and spec.ablate == {} and spec.sweep is None
    assert spec.tracking.uri == "sqlite:///results/mlflow.db"
    assert spec.tracking.experiment == "minimal"
    assert [v.name for v in expand(spec)] == ["base"]


def test_extends_deep_merges_a_chain(tmp_path: Path) -> None:
    write(
        tmp_path,
        "grand.yaml",
        """
        name: grand
        model: {dim: 128, mlp: moe}
        train: {steps: 100, optimizer: {lr: 1.0e-3, weight_decay: 0.0}}
        tracking: {experiment: shared}
        """,
    )
    write(
        tmp_path,
        "sub/parent.yaml",
        """
        extends: ../grand.yaml
        name: parent
        model: {mlp: {top_k: 1}}
        train: {optimizer: {lr: 2.0e-3}}
        """,
    )
    child = write(
        tmp_path,
        "child.yaml",
        "extends: sub/parent.yaml\nname: child\nmodel: {norm: {name: layernorm}}\n",
    )
    spec = load_spec(child)
    assert spec.name == "child" and spec.extends is None
    assert spec.train.steps == 100
    assert (spec.train.optimizer.lr, spec.train.optimizer.weight_decay) == (2.0e-3, 0.0)
    assert spec.model.fields == {
        "dim": 128,
        "mlp": {"name": "moe", "top_k": 1},
        "norm": {"name": "layernorm"},
    }
    assert spec.tracking.experiment == "shared"


def test_extends_with_another_component_drops_the_old_options(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "name: b\nmodel: {mlp: {name: moe, top_k: 1}}\n")
    child = write(tmp_path, "c.yaml", "extends: base.yaml\nname: c\nmodel: {mlp: {name: relu}}\n")
    assert load_spec(child).model.fields["mlp"] == {"name": "relu"}


def test_overrides_parse_yaml_values(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\n"),
        [
            "train.steps=50",
            "train.optimizer.lr=1e-3",  # a string to YAML 1.1; the float field converts it
            "train.compile=true",
            "train.grad_clip=null",
            "seeds=[1, 2]",
            "model.position={name: rope, style: gptj}",
            "description=two words",
        ],
    )
    assert spec.train.steps == 50 and spec.train.optimizer.lr == 1e-3
    assert spec.train.compile is True and spec.train.grad_clip is None
    assert spec.seeds == [1, 2]
    assert spec.model_config_obj().component("position")[1]["style"] == "gptj"
    assert spec.description == "two words"


def test_a_later_override_of_the_same_key_wins(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\n"),
        ["model.mlp.top_k=1", "model.mlp=moe", "model.mlp.n_experts=2"],
    )
    assert spec.model.fields["mlp"] == {"name": "moe", "n_experts": 2}


def test_override_of_an_option_of_a_bare_component_name(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\nmodel: {mlp: moe}\n"), ["model.mlp.top_k=1"]
    )
    assert spec.model.fields["mlp"] == {"name": "moe", "top_k": 1}


def test_override_of_an_option_keeps_the_presets_other_options(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\nmodel: {preset: minimind-moe}\n"),
        ["model.mlp.top_k=1", "train.seq_len=128"],
    )
    name, options = ModelConfig.preset("minimind-moe").component("mlp")
    assert spec.model_config_obj().component("mlp") == (name, {**options, "top_k": 1})
    assert options["n_experts"] == 4 and options["n_shared"] == 1  # kept from the preset


def test_overrides_into_maps_keyed_by_dotted_keys(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\n"),
        [
            "ablate.model.norm=[layernorm, rmsnorm]",
            "sweep.params.train.optimizer.lr={type: float, low: 1.0e-4, high: 1.0e-2, log: true}",
        ],
    )
    assert spec.ablate == {"model.norm": ["layernorm", "rmsnorm"]}
    assert spec.sweep is not None
    assert spec.sweep.params["train.optimizer.lr"].high == 1.0e-2


def test_corpus_next_to_the_spec_file_wins(tmp_path: Path, monkeypatch) -> None:
    corpus = write(tmp_path, "specs/corpus.txt", "to be or not to be\n")
    spec_file = write(tmp_path, "specs/s.yaml", "name: s\ndata: {corpus: corpus.txt}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(elsewhere, "corpus.txt", "another corpus\n")
    monkeypatch.chdir(elsewhere)
    assert load_spec(spec_file).data.corpus == str(corpus.resolve())


def test_corpus_relative_to_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    spec_file = write(tmp_path, "specs/s.yaml", "name: s\ndata: {corpus: data/corpus.txt}\n")
    write(tmp_path, "cwd/data/corpus.txt", "words\n")
    monkeypatch.chdir(tmp_path / "cwd")
    assert load_spec(spec_file).data.corpus == "data/corpus.txt"


def test_paths_in_a_parent_are_relative_to_the_parent(tmp_path: Path, monkeypatch) -> None:
    corpus = write(tmp_path, "base/corpus.jsonl", '{"text": "hello"}\n')
    tokenizer = write(tmp_path, "base/tok/tokenizer.json", "{}\n")
    write(
        tmp_path,
        "base/base.yaml",
        "name: b\ndata: {corpus: corpus.jsonl, tokenizer: {path: tok/tokenizer.json}}\n",
    )
    child = write(tmp_path, "child/c.yaml", "extends: ../base/base.yaml\nname: c\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(child)
    assert spec.data.corpus == str(corpus.resolve())
    assert spec.data.tokenizer.path == str(tokenizer.resolve())


COMPLEX = """
name: complex
description: every section at once
model: {dim: 96, n_heads: 3, n_kv_heads: 1, mlp: {name: moe, top_k: 1}}
train: {steps: 40, tokens: 100000, schedule: {name: wsd, warmup: 4}, grad_clip: null}
seeds: [3, 1]
ablate:
  arch:
    - {model.norm: layernorm, model.position: sinusoidal}
    - {model.norm: rmsnorm, model.position: {name: rope, style: gptj}}
  train.optimizer.lr: [1.0e-3, 3.0e-3]
sweep:
  objective: [{metric: val/bpb}, {metric: perf/tokens_per_s, direction: maximize}]
  sampler: nsga2
  storage: journal:results/optuna.log
  params:
    model.mlp.n_experts: {type: int, low: 2, high: 8, step: 2}
    train.schedule.warmup: {type: categorical, choices: [2, 4]}
"""


@pytest.mark.parametrize("name", ["complex", *(p.stem for p in shipped_specs("*.yaml"))])
def test_dump_round_trip(tmp_path: Path, name: str) -> None:
    source = (
        write(tmp_path, "c.yaml", COMPLEX) if name == "complex" else EXPERIMENTS / f"{name}.yaml"
    )
    spec = load_spec(source)
    text = dump_spec(spec)
    again = load_spec(write(tmp_path, "dumped/spec.yaml", text))
    assert again == spec
    assert spec_hash(again) == spec_hash(spec)
    assert dump_spec(again) == text
    assert [v.name for v in expand(again)] == [v.name for v in expand(spec)]


def test_expand_is_the_cartesian_product_in_order(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "s.yaml",
            """
            name: s
            seeds: [0, 1]
            ablate:
              model.norm: [layernorm, rmsnorm]
              train.optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]
            """,
        )
    )
    variants = expand(spec)
    expected = list(itertools.product(["layernorm", "rmsnorm"], [1.0e-3, 3.0e-3, 1.0e-2]))
    assert [(v.spec.model_config_obj().norm, v.spec.train.optimizer.lr) for v in variants] == (
        expected
    )
    assert [v.name for v in variants] == [f"norm={n},lr={lr}" for n, lr in expected]
    assert variants[1].assignments == {"model.norm": "layernorm", "train.optimizer.lr": 3.0e-3}
    for v in variants:
        assert v.spec.ablate == {} and v.spec.seeds == [0, 1] and v.spec.name == "s"


@pytest.mark.parametrize("name", ["complex", "single-axis", "no-ablate"])
def test_expand_gives_the_specs_validated_with_the_spec_and_validates_none_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    text = {
        "complex": COMPLEX,
        "single-axis": "name: one\ntrain: {steps: 40}\nablate: {model.norm: [layernorm, rmsnorm]}\n",
        "no-ablate": "name: none\ntrain: {steps: 40}\n",
    }[name]
    spec = load_spec(write(tmp_path, "c.yaml", text))
    validations = []
    original = Spec.model_validate.__func__

    def counted(cls, *args, **kwargs):
        validations.append(cls)
        return original(cls, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Spec, "model_validate", classmethod(counted))
        variants = expand(spec)
    assert validations == []
    cell_tree = {**spec.tree(), "ablate": {}}
    for variant in variants:  # as validating each cell on its own gives it
        assert variant.spec == validate_spec(apply(cell_tree, variant.assignments))
    # Independent copies: changing one variant changes neither the spec nor another expansion.
    variants[0].spec.train.steps = 7
    assert spec.train.steps == 40 and expand(spec)[0].spec.train.steps == 40


def test_group_axes_and_mapping_values_in_names(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "c.yaml", COMPLEX))
    variants = expand(spec)
    assert [v.name for v in variants] == [
        "norm=layernorm,position=sinusoidal,lr=0.001",
        "norm=layernorm,position=sinusoidal,lr=0.003",
        "norm=rmsnorm,position=rope(style=gptj),lr=0.001",
        "norm=rmsnorm,position=rope(style=gptj),lr=0.003",
    ]
    last = variants[-1]
    assert last.assignments == {
        "model.norm": "rmsnorm",
        "model.position": {"name": "rope", "style": "gptj"},
        "train.optimizer.lr": 3.0e-3,
    }
    assert last.spec.model_config_obj().component("position")[1]["style"] == "gptj"
    assert last.spec.sweep == spec.sweep  # each cell keeps the study settings


def test_keys_with_the_same_last_part_are_told_apart(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "s.yaml",
            """
            name: s
            ablate:
              model.vocab_size: [4096]
              data.tokenizer.vocab_size: [1024, 2048]
            """,
        )
    )
    assert [v.name for v in expand(spec)] == [
        "model.vocab_size=4096,tokenizer.vocab_size=1024",
        "model.vocab_size=4096,tokenizer.vocab_size=2048",
    ]


def test_variant_names_are_path_safe_and_unique(tmp_path: Path) -> None:
    for sub in ("a b", "a:b"):
        write(tmp_path, f"{sub}/x.txt", "text\n")
    spec = load_spec(
        write(tmp_path, "s.yaml", "name: s\nablate:\n  data.corpus: ['a b/x.txt', 'a:b/x.txt']\n")
    )
    names = [v.name for v in expand(spec)]
    assert len(set(names)) == 2
    assert all(SAFE_NAME.fullmatch(n) for n in names), names


def test_flatten_resolves_the_model_and_flattens_to_scalars(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "s.yaml",
            "name: s\ndescription: long text\nmodel: {preset: minimind-26m, position: rope-gptj}\n"
            "data: {tokenizer: {vocab_size: 6400}}\n",
        )
    )
    flat = flatten(spec)
    preset = ModelConfig.preset("minimind-26m")
    assert flat["model.preset"] == "minimind-26m"
    assert (flat["model.dim"], flat["model.n_layers"]) == (preset.dim, preset.n_layers)
    assert flat["model.head_dim"] == preset.dim // preset.n_heads
    assert flat["model.position"] == "rope" and flat["model.position.style"] == "gptj"
    assert flat["model.position.theta"] == 10000.0  # a bare alias takes the option defaults
    assert flat["model.mlp"] == "swiglu"
    assert flat["train.optimizer"] == "adamw" and flat["train.optimizer.lr"] == 3.0e-3
    assert flat["train.optimizer.betas"] == "[0.9, 0.95]"
    assert flat["seeds"] == "[0]" and flat["name"] == "s"
    assert "description" not in flat and "train.tokens" not in flat
    assert all(isinstance(v, str | int | float | bool) for v in flat.values())
    assert all(re.fullmatch(r"[\w./]+", k) for k in flat)


def test_spec_hash_follows_the_training_content(tmp_path: Path) -> None:
    def hashed(text: str) -> str:
        return spec_hash(load_spec(write(tmp_path, "s.yaml", text)))

    base = hashed("name: a\nmodel: {position: rope-gptj}\n")
    assert re.fullmatch(r"[0-9a-f]{12}", base)
    same = "name: b\ndescription: x\nseeds: [4]\nmodel: {position: {name: rope, style: gptj}}\n"
    assert hashed(same) == base
    assert hashed("name: a\nmodel: {position: rope-neox}\n") != base
    assert hashed("name: a\nmodel: {position: rope-gptj}\ntrain: {steps: 301}\n") != base
    chunks = "name: a\nmodel: {position: rope-gptj}\ntrain: {loss_chunk_tokens: %s}\n"
    assert hashed(chunks % "null") == base  # the default: hashes from before the option hold
    assert hashed(chunks % "64") != base


def test_spec_hash_ignores_vocab_padding_that_adds_no_row(tmp_path: Path) -> None:
    def hashed(model: str) -> str:
        return spec_hash(load_spec(write(tmp_path, "s.yaml", f"name: a\nmodel: {model}\n")))

    # the tiny preset's 2048 tokens are a multiple of 64: padding changes nothing it trains
    assert hashed("{pad_vocab_multiple: 1}") == hashed("{pad_vocab_multiple: 64}")
    assert hashed("{pad_vocab_multiple: 1}") != hashed("{pad_vocab_multiple: 4096}")
    odd = "{vocab_size: 2049, pad_vocab_multiple: %d}"
    assert hashed(odd % 1) != hashed(odd % 64) != hashed(odd % 128)


def test_spec_hash_keeps_its_value_under_the_standard_parametrization(tmp_path: Path) -> None:
    def hashed(model: str) -> str:
        return spec_hash(load_spec(write(tmp_path, "s.yaml", f"name: a\nmodel: {model}\n")))

    # the default, written or not, hashes as the same spec did before the field existed
    assert hashed("{dim: 64}") == hashed("{parametrization: standard}") == "372c84f9a4e9"
    mup = "{parametrization: {name: mup, base_width: %d}}"
    assert hashed(mup % 64) != hashed("{dim: 64}")  # μP at its base: another spec all the same
    assert hashed(mup % 32) != hashed(mup % 64)


def test_with_values_applies_and_validates(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "s.yaml", "name: s\n"))
    tuned = with_values(spec, {"train.optimizer.lr": 1e-3, "model.mlp": "relu"})
    assert tuned.train.optimizer.lr == 1e-3 and tuned.model_config_obj().mlp == "relu"
    assert spec.train.optimizer.lr == 3.0e-3  # the original is untouched
    with pytest.raises(SpecError, match=r"^model\.mlp: unknown mlp"):
        with_values(spec, {"model.mlp": "relux"})


def test_a_sweep_searches_an_optimizer_s_own_options(tmp_path: Path) -> None:
    path = tmp_path / "muon.yaml"
    path.write_text(
        "name: muon\ntrain: {optimizer: {name: muon}}\nsweep:\n  params:\n"
        "    train.optimizer.adamw_lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}\n"
        "    train.optimizer.momentum: {type: categorical, choices: [0.9, 0.95]}\n"
    )
    spec = load_spec(path)
    assert set(spec.sweep.params) == {"train.optimizer.adamw_lr", "train.optimizer.momentum"}
    trial = with_values(spec, {"train.optimizer.adamw_lr": 5e-3, "train.optimizer.momentum": 0.9})
    assert trial.train.optimizer.options()["adamw_lr"] == 5e-3
    assert trial.train.optimizer.options()["momentum"] == 0.9


def test_sweep_section_normalizes_shorthands(tmp_path: Path) -> None:
    single = load_spec(
        write(
            tmp_path,
            "s.yaml",
            """
            name: s
            sweep:
              objective: perf/tokens_per_s
              direction: maximize
              sampler: random
              reduce: {name: mean_last_k, k: 5}
              storage: postgresql+psycopg2://user@db:5432/optuna
              params:
                train.batch_size: {type: int, low: 8.0, high: 32, log: true}
            """,
        )
    ).sweep
    assert single is not None
    assert single.objective == [Objective(metric="perf/tokens_per_s", direction="maximize")]
    assert single.sampler.name == "random" and single.pruner.name == "median"
    assert (single.reduce.name, single.reduce.k) == ("mean_last_k", 5)
    param = single.params["train.batch_size"]
    assert (param.low, param.high) == (8, 32) and isinstance(param.low, int)
    multi = load_spec(write(tmp_path, "c.yaml", COMPLEX)).sweep
    assert multi is not None and multi.is_multi_objective
    assert multi.pruner.name == "none"  # the default for a study that cannot be pruned
    assert multi.directions == ["minimize", "maximize"]


def test_a_sweep_objective_takes_its_direction_from_the_metric(tmp_path: Path) -> None:
    # A sweep over throughput that leaves `direction` out must search for the fastest model,
    # not the slowest.
    sweep = load_spec(
        write(
            tmp_path,
            "s.yaml",
            """
            name: s
            sweep:
              objective: [perf/tokens_per_s, val/bpb, {metric: perf/mfu}]
            """,
        )
    ).sweep
    assert sweep is not None
    assert sweep.directions == ["maximize", "minimize", "maximize"]
    assert SweepConfig().directions == ["minimize"]  # the default objective, val/bpb


def test_the_sweep_section_of_a_spec_without_one_is_an_error_naming_it() -> None:
    spec = validate_spec({"name": "x"})
    with pytest.raises(SpecError, match=r"^sweep: missing: `minimind sweep` needs a sweep"):
        spec.sweep_section()
    swept = validate_spec({"name": "x", "sweep": {"objective": "val/bpb"}})
    assert swept.sweep_section() is swept.sweep


def test_plugins_are_loaded_before_the_model_validates(tmp_path: Path) -> None:
    # In a subprocess: the plugin registers a component for good, other tests must not see it.
    write(
        tmp_path,
        "spec_test_plugin.py",
        """
        import torch
        from registry import register

        @register("norm", "spec_test_norm")
        class SpecTestNorm(torch.nn.LayerNorm):
            def __init__(self, *, dim):  # no Options class: built from its sizes alone
                super().__init__(dim)
        """,
    )
    write(
        tmp_path, "s.yaml", "name: s\nplugins: [spec_test_plugin]\nmodel: {norm: spec_test_norm}\n"
    )
    code = "from minimind.spec import load_spec; print(load_spec('s.yaml').model_config_obj().norm)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "spec_test_norm"


@pytest.mark.parametrize(
    ("tree", "error"),
    [
        (
            {"name": "x", "ablate": {"train.seq_len": [64, 100000]}},
            "ablate.train.seq_len[1]: must be <= model.max_seq_len",
        ),
        (
            {
                "name": "x",
                "sweep": {"params": {"train.seq_len": {"type": "int", "low": 64, "high": 100000}}},
            },
            "sweep.params.train.seq_len.high: must be <= model.max_seq_len",
        ),
    ],
)
def test_the_schema_validates_the_sections_and_the_expansion_step_the_variants(
    tree: dict, error: str
) -> None:
    """A variant's problem is the expansion step's (`validate_spec`), with its one-line error;
    validating the schema alone checks the sections."""
    assert Spec.model_validate(tree).name == "x"
    with pytest.raises(SpecError, match=re.escape(error)):
        validate_spec(tree)


def test_the_experiment_is_resolved_once_by_validation() -> None:
    assert validate_spec({"name": "x"}).experiment == "x"
    named = validate_spec({"name": "x", "tracking": {"experiment": "shared"}})
    assert named.experiment == "shared" == named.tracking.experiment
