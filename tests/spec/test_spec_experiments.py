"""The shipped specs in experiments/: every one loads and expands, and each ablates what it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from minimind.model.config import ModelConfig
from minimind.spec import expand, load_spec
from tests.conftest import shipped_specs

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# the top level and experiments/mup/ (experiments/study/ holds a manifest and its arms, which
# tests/study loads)
SPECS = shipped_specs("*.yaml", "mup/*.yaml")


def test_the_axis_specs_are_shipped() -> None:
    names = {p.stem for p in SPECS}
    axes = {"norm", "position", "attention", "mlp", "norm_placement"}
    assert {"quickstart", "base", "minimind-26m", *axes} <= names


@pytest.mark.parametrize("path", SPECS, ids=[str(p.relative_to(EXPERIMENTS)) for p in SPECS])
def test_every_shipped_spec_loads_and_expands(path: Path) -> None:
    spec = load_spec(path)
    prefix = f"{path.parent.name}_" if path.parent != EXPERIMENTS else ""
    assert spec.name == prefix + path.stem
    assert spec.description.strip()
    variants = expand(spec)
    assert len({v.name for v in variants}) == len(variants) >= 1
    for variant in variants:
        cfg = variant.spec.model_config_obj()
        assert cfg.num_params() > 0 and variant.spec.train.seq_len <= cfg.max_seq_len


def test_the_mup_transfer_specs_cross_three_widths_with_both_parametrizations() -> None:
    for optimizer in ("adamw", "muon"):
        variants = expand(load_spec(EXPERIMENTS / "mup" / f"transfer_{optimizer}.yaml"))
        cells = {
            (cfg.dim, cfg.parametrization.name, cfg.parametrization.base_width)
            for cfg in (v.spec.model_config_obj() for v in variants)
        }
        assert cells == {
            (dim, name, base)
            for dim in (64, 128, 256)
            for name, base in (("standard", None), ("mup", 64))
        }
        assert all(v.spec.train.optimizer.name == optimizer for v in variants)
        lrs = load_spec(EXPERIMENTS / "mup" / f"transfer_{optimizer}.yaml").sweep_section()
        choices = sorted(lrs.params["train.optimizer.lr"].choices or [])
        assert all(b / a == 2 for a, b in zip(choices[:-1], choices[1:], strict=True)), (
            choices
        )  # a ×2 grid


def components(name: str, slot: str) -> list[tuple[str, dict]]:
    return [
        v.spec.model_config_obj().component(slot) for v in expand(load_spec(EXPERIMENTS / name))
    ]


def test_axis_specs_vary_their_slot_only() -> None:
    assert [n for n, _ in components("norm.yaml", "norm")] == ["layernorm", "rmsnorm"]
    assert [n for n, _ in components("attention.yaml", "attention")] == ["mha", "gqa", "mqa"]
    assert [n for n, _ in components("norm_placement.yaml", "block")] == ["prenorm", "postnorm"]
    position = components("position.yaml", "position")
    assert [(n, o.get("style")) for n, o in position] == [
        ("sinusoidal", None),
        ("rope", "neox"),
        ("rope", "gptj"),
    ]


@pytest.mark.parametrize(
    ("name", "slot"),
    [
        ("norm.yaml", "norm"),
        ("attention.yaml", "attention"),
        ("position.yaml", "position"),
        ("norm_placement.yaml", "block"),
        ("mlp.yaml", "mlp"),
    ],
)
def test_axis_variants_differ_from_base_in_their_slot_alone(name: str, slot: str) -> None:
    base = load_spec(EXPERIMENTS / "base.yaml")
    base_cfg = base.model_config_obj()
    for variant in expand(load_spec(EXPERIMENTS / name)):
        cfg = variant.spec.model_config_obj()
        assert cfg.replace(**{slot: getattr(base_cfg, slot)}) == base_cfg, variant.name
        assert variant.spec.train == base.train, variant.name


def test_mlp_variants_have_matched_active_parameters() -> None:
    variants = expand(load_spec(EXPERIMENTS / "mlp.yaml"))
    kinds = [v.spec.model_config_obj().component("mlp")[0] for v in variants]
    assert kinds == ["relu", "swiglu", "moe"]
    active = [v.spec.model_config_obj().num_active_params() for v in variants]
    assert max(active) / min(active) - 1 < 0.02, active
    moe = variants[2].spec.model_config_obj()
    assert moe.num_params() > 1.3 * moe.num_active_params()  # the experts that sit idle
    # The default widths would not be matched: the spec's hidden sizes are what makes it fair.
    relu = ModelConfig.preset("tiny", **variants[0].spec.model.fields).replace(mlp="relu")
    swiglu = relu.replace(mlp="swiglu")
    assert swiglu.num_active_params() / relu.num_active_params() - 1 > 0.05


def test_quickstart_is_a_small_paired_ablation() -> None:
    spec = load_spec(EXPERIMENTS / "quickstart.yaml")
    variants = expand(spec)
    pairs = [
        (v.spec.model_config_obj().component("norm")[0], v.spec.model_config_obj().position)
        for v in variants
    ]
    assert pairs == [("rmsnorm", "rope"), ("layernorm", "sinusoidal")]
    assert spec.seeds == [0, 1]
    assert spec.train.steps is not None and spec.train.steps <= 300
    assert spec.data.corpus == "tinyshakespeare"
    assert all(v.spec.model_config_obj().num_params() < 1_000_000 for v in variants)


def test_minimind_26m_is_gpu_sized() -> None:
    spec = load_spec(EXPERIMENTS / "minimind-26m.yaml")
    cfg = spec.model_config_obj()
    assert cfg == ModelConfig.preset("minimind-26m")
    assert 25e6 < cfg.num_params() < 27e6
    assert (spec.train.seq_len, spec.train.precision) == (512, "bf16")
    assert spec.data.tokenizer.vocab_size == cfg.vocab_size


def test_tinystories_gpu_reads_the_hub_dataset_with_its_validation_split() -> None:
    spec = load_spec(EXPERIMENTS / "tinystories_gpu.yaml")
    data = spec.data
    assert (data.corpus, data.split, data.val_split) == (
        "hf:roneneldan/TinyStories",
        "train",
        "validation",
    )
    assert spec.train.precision == "bf16" and spec.train.compile
    assert spec.model_config_obj().vocab_size >= data.tokenizer.vocab_size


def test_modern_ablates_optimizer_mlp_at_equal_parameters_and_qk_norm() -> None:
    variants = expand(load_spec(EXPERIMENTS / "modern.yaml"))
    assert len(variants) == 8
    cells = {
        (
            v.spec.train.optimizer.name,
            v.spec.model_config_obj().component("mlp")[0],
            v.spec.model_config_obj().component("attention")[1]["qk_norm"],
        ): v.spec.model_config_obj().num_params()
        for v in variants
    }
    assert {k[0] for k in cells} == {"muon", "adamw"}
    for optimizer in ("muon", "adamw"):
        for qk_norm in ("rmsnorm", "none"):
            assert cells[optimizer, "relu2", qk_norm] == cells[optimizer, "swiglu", qk_norm]
    assert cells["muon", "relu2", "rmsnorm"] - cells["muon", "relu2", "none"] == 256
