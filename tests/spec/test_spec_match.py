"""`match:` resizes a knob of each variant to the baseline's size; checked on built models."""

from __future__ import annotations

import pytest
import torch

from minimind.model.lm import MiniMindLM
from minimind.spec import SpecError, expand, validate_spec
from registry.declarations.mlp import swiglu_hidden


def _spec(**match) -> dict:
    return {
        "name": "fair",
        "model": {"preset": "tiny", "dim": 64, "n_layers": 2, "n_heads": 2},
        "ablate": {"model.mlp": ["swiglu", "relu"]},
        "match": {"knob": "model.mlp.hidden", **match},
    }


def _built_params(spec) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in MiniMindLM(spec.model_config_obj()).parameters())


def test_swiglu_against_relu_at_equal_parameters() -> None:
    """Without match, the ReLU MLP (4·dim) is smaller than SwiGLU's; matched, its hidden width
    is 1.5× SwiGLU's (2·dim·h_relu = 3·dim·h_swiglu) and the built models have equal sizes."""
    plain = validate_spec({k: v for k, v in _spec().items() if k != "match"})
    sizes = [_built_params(v.spec) for v in expand(plain)]
    assert abs(sizes[1] - sizes[0]) / sizes[0] > 0.01  # a real mismatch to fix
    swiglu, relu = expand(validate_spec(_spec(tolerance=0.001)))
    assert [swiglu.name, relu.name] == ["mlp=swiglu", "mlp=relu"]  # names unchanged
    h_swiglu = swiglu.spec.model_config_obj().component("mlp")[1]["hidden"] or swiglu_hidden(64)
    assert relu.spec.model_config_obj().component("mlp")[1]["hidden"] == 3 * h_swiglu // 2
    assert _built_params(relu.spec) == _built_params(swiglu.spec)
    assert swiglu.spec.model_config_obj().num_params() == _built_params(swiglu.spec)


def test_match_on_flops_per_token() -> None:
    swiglu, relu = expand(validate_spec(_spec(by="flops", tolerance=0.01)))
    seq = swiglu.spec.train.seq_len
    a, b = (v.spec.model_config_obj().flops_per_token(seq) for v in (swiglu, relu))
    assert abs(a - b) / a <= 0.01


@pytest.mark.parametrize(
    ("match", "message"),
    [
        ({"knob": "model.nosuch"}, r"match: variant mlp=relu: model\.nosuch=1: model"),
        ({"knob": "model.mlp.hidden", "tolerance": 0}, r"match\.tolerance"),
        ({"knob": "train.steps"}, r"match\.knob"),
    ],
)
def test_bad_match_is_one_line_naming_the_field(match, message) -> None:
    tree = _spec()
    tree["match"] = match
    with pytest.raises(SpecError, match=message):
        validate_spec(tree)


def test_non_embedding_params_are_the_blocks_and_final_norm() -> None:
    spec = expand(validate_spec(_spec()))[0].spec
    with torch.device("meta"):
        model = MiniMindLM(spec.model_config_obj())
    body = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("layers.", "norm.")))
    assert spec.model_config_obj().num_non_embedding_params() == body


def test_moe_against_dense_at_equal_active_parameters() -> None:
    """Two of four experts per token: each expert about half the dense MLP's width, so that a
    token uses as many parameters (the router's few aside)."""
    tree = _spec(by="active_params")
    tree["ablate"] = {"model.mlp": ["swiglu", {"name": "moe", "n_experts": 4, "top_k": 2}]}
    dense, moe = expand(validate_spec(tree))
    cfg = moe.spec.model_config_obj()
    hidden = cfg.component("mlp")[1]["hidden"]
    assert hidden in (swiglu_hidden(64) // 2, swiglu_hidden(64) // 2 - 1)
    target = dense.spec.model_config_obj().num_active_params()
    assert abs(cfg.num_active_params() - target) / target <= 0.01
    assert cfg.num_params() > _built_params(dense.spec)  # all experts together are larger
    assert cfg.num_params() == _built_params(moe.spec)
