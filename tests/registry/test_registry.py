"""The registry mechanism: lookup, errors, options, plugins, and `minimind registry`."""

import argparse
import sys
import textwrap

import pytest
import torch

import registry
import registry.core
from minimind import MiniMindLM, ModelConfig
from minimind.commands import registry_info

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test disappear after it."""
    snapshot = {slot: dict(names) for slot, names in registry.core._names.items()}
    monkeypatch.setattr(registry.core, "_names", snapshot)


def test_slots_and_choices():
    assert registry.MODEL_SLOTS == ("norm", "position", "attention", "mlp", "block")
    assert registry.SLOTS == (*registry.MODEL_SLOTS, "optimizer")
    assert registry.choices("norm") == ["layernorm", "rmsnorm"]
    assert registry.choices("position") == ["learned", "none", "rope", "sinusoidal"]
    assert registry.choices("attention") == ["gqa", "mha", "mqa"]
    assert registry.choices("mlp") == ["gelu", "moe", "relu", "relu2", "swiglu"]
    assert registry.choices("block") == ["postnorm", "prenorm"]
    assert registry.choices("optimizer") == ["adamw", "muon", "sgd"]
    assert registry.aliases("position", "rope") == {
        "rope-gptj": {"style": "gptj"},
        "rope-neox": {"style": "neox"},
    }
    assert issubclass(registry.RegistryError, ValueError)


def test_unknown_name_names_the_slot_lists_choices_and_suggests():
    with pytest.raises(registry.RegistryError) as info:
        registry.build("position", "rop-gptj", dim=8, head_dim=4, max_seq_len=8)
    message = str(info.value)
    assert "unknown position 'rop-gptj'" in message
    for name in ("learned", "none", "rope", "rope-gptj", "rope-neox", "sinusoidal"):
        assert name in message
    assert message.endswith("did you mean 'rope-gptj'?")


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("rmsnrom", "; did you mean 'rmsnorm'?"),  # a typo
        ("gpt2", "; did you mean 'gpt2-small'?"),  # a shortened name, the only one it begins
        ("ro", ""),  # begins two names, and is like neither closely enough
        ("batchnorm", ""),  # like no name: no suggestion rather than an absurd one
        ("", ""),
    ],
)
def test_suggest_offers_a_close_or_lengthened_name_or_nothing(word, expected):
    names = ["gpt2-small", "layernorm", "rmsnorm", "rope-gptj", "rope-neox"]
    assert registry.did_you_mean(word, names) == expected


def test_an_unrelated_name_gets_no_suggestion():
    with pytest.raises(registry.RegistryError) as info:
        registry.build("norm", "batchnorm", dim=8)
    assert str(info.value).endswith("choices: layernorm, rmsnorm")


def test_unknown_slot():
    with pytest.raises(registry.RegistryError, match="unknown slot 'norms'; slots: norm, position"):
        registry.choices("norms")


def test_unknown_option_names_it_and_lists_valid_ones():
    with pytest.raises(registry.RegistryError) as info:
        registry.resolve("position", {"name": "rope", "thetta": 1e4})
    message = str(info.value)
    assert "unknown option 'thetta' for position 'rope'" in message
    assert "valid options: style, theta, fraction" in message
    assert "did you mean 'theta'" in message
    with pytest.raises(registry.RegistryError, match="valid options: \\(none\\)"):
        registry.resolve("block", {"name": "prenorm", "eps": 1e-5})


@pytest.mark.parametrize(
    "slot, spec, text",
    [
        (
            "position",
            {"name": "rope", "theta": "big"},
            "option 'theta' of position 'rope' must be float > 0",
        ),
        ("position", {"name": "rope", "style": "llama"}, "must be neox|gptj"),
        ("position", {"name": "rope", "fraction": 1.5}, "must be float > 0, <= 1"),
        (
            "mlp",
            {"name": "moe", "n_experts": 2.5},
            "option 'n_experts' of mlp 'moe' must be int > 0",
        ),
        (
            "norm",
            {"name": "layernorm", "bias": "maybe"},
            "option 'bias' of norm 'layernorm' must be bool",
        ),
    ],
)
def test_ill_typed_option_names_it_and_lists_valid_ones(slot, spec, text):
    with pytest.raises(registry.RegistryError) as info:
        registry.resolve(slot, spec)
    assert text in str(info.value)
    assert "valid options:" in str(info.value)


def test_bad_spec_shapes():
    with pytest.raises(registry.RegistryError, match="needs a string 'name'"):
        registry.resolve("norm", {"eps": 1e-5})
    with pytest.raises(registry.RegistryError, match="must be a name or a mapping"):
        registry.resolve("norm", ["rmsnorm"])


def test_resolve_fills_defaults_and_coerces_types():
    assert registry.resolve("norm", "layernorm") == ("layernorm", {"eps": 1e-5, "bias": True})
    name, options = registry.resolve("mlp", {"name": "moe", "n_experts": "8", "top_k": 1})
    assert name == "moe" and options["n_experts"] == 8 and options["balance"] == "aux_loss"
    assert registry.resolve("position", {"name": "rope", "theta": "1e6"})[1]["theta"] == 1e6


def test_build_passes_options_and_dims():
    norm = registry.build("norm", {"name": "rmsnorm", "eps": 1e-3}, dim=12)
    assert norm.eps == 1e-3 and norm.weight.shape == (12,)


def test_describe_reports_types_and_defaults():
    options = {o.name: o for o in registry.describe("position", "rope-gptj")}
    assert options["style"] == registry.OptionInfo("style", "neox|gptj", "neox")
    assert options["theta"] == registry.OptionInfo("theta", "float > 0", 10000.0)
    moe = {o.name: (o.type, o.default) for o in registry.describe("mlp", "moe")}
    assert moe["expert"] == ("str", "swiglu")
    assert moe["hidden"] == ("int > 0 | None", None)
    assert moe["balance"] == ("aux_loss|bias", "aux_loss")
    assert registry.describe("block", "prenorm") == []


def test_registering_a_taken_name_is_an_error(scratch_registry):
    with pytest.raises(registry.RegistryError, match="already registered"):

        @registry.register("norm", "rmsnorm")
        class Impostor(torch.nn.Module):
            pass


PLUGIN = '''
from dataclasses import dataclass
import torch
import registry


@registry.register("norm", "scalenorm", "scale-norm")
class ScaleNorm(torch.nn.Module):
    """Nguyen & Salazar's ScaleNorm: g * x / ||x||, one learned scalar."""

    @dataclass(frozen=True)
    class Options:
        eps: float = 1e-5

    def __init__(self, options, *, dim):
        super().__init__()
        self.eps = options.eps
        self.g = torch.nn.Parameter(torch.tensor(float(dim) ** 0.5))

    def forward(self, x):
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)
'''


def test_plugin_component_from_user_code(tmp_path, monkeypatch, scratch_registry):
    (tmp_path / "user_norms_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_norms_plugin", raising=False)
    registry.load_plugins(["user_norms_plugin"])
    assert "scalenorm" in registry.choices("norm")

    config = ModelConfig(
        vocab_size=61, dim=32, n_layers=2, norm={"name": "scale-norm", "eps": 1e-4}
    )
    assert config.component("norm") == ("scalenorm", {"eps": 1e-4})
    model = MiniMindLM(config)
    assert type(model.norm).__name__ == "ScaleNorm"
    # counted without a param_count hook: built on the meta device
    assert config.num_params() == model.num_params()
    ids = torch.randint(0, 61, (2, 6))
    out = model(ids, labels=ids)
    out.loss.backward()
    assert model.norm.g.grad is not None
    monkeypatch.delitem(sys.modules, "user_norms_plugin")


def test_load_plugins_reports_a_missing_module():
    with pytest.raises(registry.RegistryError, match="cannot import plugin module 'no_such_mod_x'"):
        registry.load_plugins(["no_such_mod_x"])


def test_option_dataclasses_are_frozen():
    for slot in registry.SLOTS:
        for name in registry.choices(slot):
            options = getattr(registry.component_class(slot, name), "Options", None)
            if options is not None:
                assert options.__dataclass_params__.frozen, (slot, name)


# --- minimind registry [SLOT] -------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """`minimind registry ...` through the command module alone (the CLI shell is the lead's)."""
    parser = argparse.ArgumentParser(prog="minimind")
    registry_info.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_lists_every_slot(capsys):
    assert main(["registry"]) == 0
    out = capsys.readouterr().out
    for slot in registry.SLOTS:
        assert f"\n{slot}\n" in f"\n{out}" or f"\n{slot}  (" in f"\n{out}"
        for name in registry.choices(slot):
            assert f"  {name}" in out
    assert "rope  (aliases: rope-gptj [style=gptj], rope-neox [style=neox])" in out
    assert "    theta: float > 0 = 10000.0" in out
    assert "    qk_norm: none|rmsnorm|layernorm = 'none'" in out
    assert "    aux_scope: batch|sequence = 'batch'" in out
    assert "  relu2\n" in out and "    ns_steps: int > 0 < 100 = 5" in out
    assert "optimizer  (each also takes lr and weight_decay)" in out


def test_cli_lists_one_slot(capsys):
    assert main(["registry", "mlp"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "mlp"
    assert "    top_k: int > 0 = 2" in out
    assert "    balance: aux_loss|bias = 'aux_loss'" in out
    assert "norm" not in out.splitlines()


def test_cli_unknown_slot_is_bad_input(capsys):
    assert main(["registry", "nrom"]) == 2
    assert "unknown slot 'nrom'" in capsys.readouterr().err


def test_cli_lists_plugin_components(tmp_path, monkeypatch, scratch_registry, capsys):
    (tmp_path / "user_norms_plugin_cli.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["registry", "norm", "--plugin", "user_norms_plugin_cli"]) == 0
    assert "  scalenorm  (aliases: scale-norm)" in capsys.readouterr().out
    monkeypatch.delitem(sys.modules, "user_norms_plugin_cli")


@pytest.mark.parametrize(
    ("spec", "option"),
    [
        ({"name": "adamw", "betas2": 0.9}, "betas2"),  # unknown
        ({"name": "adamw", "eps": -1.0}, "eps"),  # ill-typed
        ({"name": "no_such_optimizer"}, None),  # about the name, not an option
    ],
)
def test_a_registry_error_names_the_option_it_is_about(spec, option):
    with pytest.raises(registry.RegistryError) as caught:
        registry.resolve("optimizer", spec)
    assert caught.value.option == option


def test_an_option_an_alias_fixes_is_named():
    with pytest.raises(registry.RegistryError, match="fixed") as caught:
        registry.resolve("position", {"name": "rope-gptj", "style": "neox"})
    assert caught.value.option == "style"


@pytest.mark.parametrize(
    ("slot", "name", "dims"),
    [
        ("mlp", "relu2", {"dim": 16}),
        ("mlp", "swiglu", {"dim": 16}),
        ("mlp", "moe", {"dim": 16}),
        ("attention", "gqa", {"dim": 16, "n_heads": 2, "n_kv_heads": 1, "head_dim": 8}),
    ],
)
def test_components_build_without_dropout_which_defaults_to_none(slot, name, dims) -> None:
    """`registry.build("mlp", "relu2", dim=16)` from Python: the sizes alone, no dropout."""
    module = registry.build(slot, name, **dims)
    rates = [m.p for m in module.modules() if isinstance(m, torch.nn.Dropout)]
    assert rates == [0.0] * len(rates)
    assert registry.count_params(slot, name, **dims) == sum(p.numel() for p in module.parameters())
