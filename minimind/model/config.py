"""ModelConfig: the `model:` section of a spec, validated, with parameter and FLOP counts.

Each of the five slots (norm, position, attention, mlp, block) holds a component spec, a bare name
or a mapping with `name` plus options, validated through the registry when the config is built.
Everything is counted from the config alone, before any weights exist.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

import registry
from minimind.foundations.strict_config import StrictNumbers, field_error
from registry.declarations.block import Block as BlockDeclaration

Component = str | dict[str, Any]

# MiniMind2-small (jingyaogong/minimind): 25.8M parameters.
MINIMIND_26M: dict[str, Any] = {
    "vocab_size": 6400,
    "dim": 512,
    "n_layers": 8,
    "n_heads": 8,
    "n_kv_heads": 2,
    "max_seq_len": 512,
    "norm": "rmsnorm",
    "position": {"name": "rope", "style": "neox", "theta": 1e6},
    "attention": "gqa",
    "mlp": "swiglu",
    "block": "prenorm",
    "tie_embeddings": True,
}

PRESETS: dict[str, dict[str, Any]] = {
    # The defaults: trains on a laptop CPU in seconds.
    "tiny": {},
    "minimind-26m": MINIMIND_26M,
    # MiniMind2-MoE: the same with 4 routed experts (top-2) and 1 shared expert, balanced as
    # MiniMind2 balances them (aux_loss_alpha 0.1, seq_aux: the loss per sequence, averaged).
    "minimind-moe": {
        **MINIMIND_26M,
        "mlp": {
            "name": "moe",
            "n_experts": 4,
            "top_k": 2,
            "n_shared": 1,
            "aux_loss_coef": 0.1,
            "aux_scope": "sequence",
        },
    },
    # GPT-2 small with nanoGPT's padded vocabulary: 124.5M parameters.
    "gpt2-small": {
        "vocab_size": 50304,
        "dim": 768,
        "n_layers": 12,
        "n_heads": 12,
        "n_kv_heads": None,
        "max_seq_len": 1024,
        "norm": "layernorm",
        "position": "learned",
        "attention": {"name": "mha", "bias": True},
        "mlp": {"name": "gelu", "approximate": "tanh", "bias": True},
        "block": "prenorm",
        "tie_embeddings": True,
    },
    # Llama-3 architecture at GPT-2-small size: untied, GQA, RoPE theta 5e5, RMSNorm eps 1e-6.
    "llama-like": {
        "vocab_size": 32000,
        "dim": 768,
        "n_layers": 12,
        "n_heads": 12,
        "n_kv_heads": 4,
        "max_seq_len": 2048,
        "norm": {"name": "rmsnorm", "eps": 1e-6},
        "position": {"name": "rope", "style": "neox", "theta": 500000.0},
        "attention": "gqa",
        "mlp": "swiglu",
        "block": "prenorm",
        "tie_embeddings": False,
    },
    # The choices of modded-nanogpt and nanochat at GPT-2-small size: RMSNorm, RoPE, QK-norm,
    # ReLU², untied head, logit soft-capping at 30, zero-initialised output projections (train
    # it with `train.optimizer.name: muon`, as experiments/modern.yaml does): 162.2M parameters.
    "modern": {
        "vocab_size": 50304,
        "dim": 768,
        "n_layers": 12,
        "n_heads": 6,
        "n_kv_heads": None,
        "max_seq_len": 1024,
        "norm": "rmsnorm",
        "position": {"name": "rope", "style": "neox", "theta": 10000.0},
        "attention": {"name": "mha", "qk_norm": "rmsnorm"},
        "mlp": "relu2",
        "block": "prenorm",
        "tie_embeddings": False,
        "logit_softcap": 30.0,
        "init": {"scheme": "normal", "zero_out_proj": True},
    },
}


class InitConfig(StrictNumbers):
    """How `MiniMindLM` initialises its weights (`model.init`).

    - `normal` (default; GPT-2, nanoGPT): linear and embedding weights N(0, 0.02), biases 0, and
      the residual output projections (o_proj, down_proj) N(0, 0.02 / sqrt(2·n_layers)).
    - `fan_in`: linear weights N(0, 1 / fan_in), the output projections' std further divided by
      sqrt(2·n_layers); embeddings N(0, 0.02), biases 0.
    - `torch_default`: what the torch modules are built with (nn.Linear's Kaiming-uniform,
      nn.Embedding's N(0, 1)); MiniMind2's own model trains from this.
    `zero_out_proj` (modded-nanogpt) then zeroes the output projections, so each block starts as
    the identity on the residual stream.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    scheme: Literal["normal", "fan_in", "torch_default"] = "normal"
    zero_out_proj: bool = False


MUP_OPTIMIZERS = ("adamw", "muon")
"""The optimizers μP is defined for here (`minimind.model.mup`; SGD's μP is another table, not
implemented): a spec under mup with another optimizer is an error."""
BLOCK_PARTS = ("attention", "mlp", "norm")
"""The keyword arguments a block is built with: its attention and mlp modules, and a factory of
its norms (`MiniMindLM`)."""


class ParametrizationConfig(StrictNumbers):
    """How initialisation, learning rates and the output scale depend on width (`model.parametrization`).

    `standard` (default): as `init` says, one lr for every parameter. `mup`: the maximal update
    parametrization for Adam (Yang et al. 2022), relative to `base_width`: the width at which it
    equals the standard parametrization and at which its hyperparameters were tuned. Written
    `mup` alone it is an error (it needs a base width); `{name: mup, base_width: 64}` in full.
    `base_head_dim`: the head dimension at `base_width` (null: head_dim · base_width / dim, the
    head dimension grows with the width; set it to `head_dim` to hold the heads fixed and grow
    their number). `embedding_lr_mult`: the embedding tables' lr over the base lr, a knob of its
    own. The rules are `minimind.model.mup`'s; docs/mup.md explains them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Literal["standard", "mup"] = "standard"
    base_width: int | None = Field(default=None, gt=0)
    base_head_dim: int | None = Field(default=None, gt=0)
    embedding_lr_mult: float = Field(default=1.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _name_alone(cls, data: Any) -> Any:
        # `parametrization: mup` is the mapping `{name: mup}`, as a component slot reads a name
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _fields_of_the_name(self) -> ParametrizationConfig:
        if self.name == "mup" and self.base_width is None:
            field_error(
                ("base_width",),
                "mup needs base_width, the width at which it equals the standard "
                "parametrization (e.g. {name: mup, base_width: 64})",
            )
        if self.name == "standard":
            # by value, not by presence: `model_dump` writes the defaults back in
            for field in ("base_width", "base_head_dim", "embedding_lr_mult"):
                if getattr(self, field) != type(self).model_fields[field].default:
                    field_error(
                        (field,), "is a setting of mup; the standard parametrization has none"
                    )
        return self


class ModelConfig(StrictNumbers):
    """A decoder-only LM assembled from registry components; frozen (use `replace` to change it).

    `n_kv_heads` is used by `gqa` only (`mha` has n_heads key/value heads and `mqa` one), so one
    config can ablate the attention kind. `head_dim` defaults to dim // n_heads.

    `vocab_size` is the number of real token ids; the embedding and LM head hold
    `padded_vocab_size` rows, vocab_size rounded up to a multiple of `pad_vocab_multiple` (1: no
    padding), so that the head's matmul has aligned shapes (GPT-2's 50257 -> 50304). As in
    nanoGPT, the extra rows are ordinary trainable rows that no target uses: training pushes their
    logits down, the loss is a softmax over all padded_vocab_size logits (so bits per byte stay an
    honest code length), and generation samples from the first vocab_size logits only. Parameter
    and FLOP counts include the padded rows, since the tables really hold them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(2048, gt=0)
    dim: int = Field(64, gt=0)
    n_layers: int = Field(2, gt=0)
    n_heads: int = Field(4, gt=0)
    n_kv_heads: int | None = Field(2, gt=0)
    head_dim: int | None = Field(None, gt=0)
    max_seq_len: int = Field(256, gt=0)
    norm: Component = "rmsnorm"
    position: Component = "rope"
    attention: Component = "gqa"
    mlp: Component = "swiglu"
    block: Component = "prenorm"
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    tie_embeddings: bool = True
    init: InitConfig = Field(default_factory=InitConfig)
    parametrization: ParametrizationConfig = Field(default_factory=ParametrizationConfig)
    logit_softcap: float | None = Field(
        None, gt=0, description="cap·tanh(logits / cap) on the logits (null: off)"
    )
    pad_vocab_multiple: int = Field(
        64,
        ge=1,
        description="round the embedding/LM-head rows up to a multiple of this (1: no padding)",
    )

    @classmethod
    def preset_names(cls) -> list[str]:
        return list(PRESETS)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """The preset `name` with `overrides` (whole fields; a slot mapping replaces the preset's)."""
        if name not in PRESETS:
            known = ", ".join(PRESETS)
            raise ValueError(
                f"unknown preset {name!r}; presets: {known}{registry.did_you_mean(name, PRESETS)}"
            )
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with `changes`, validated again (unlike `model_copy(update=...)`)."""
        return type(self)(**{**self.model_dump(), **changes})

    @field_validator(*registry.MODEL_SLOTS, mode="plain", json_schema_input_type=Component)
    @classmethod
    def _known_component(cls, spec: Any, info: ValidationInfo) -> Component:
        # "plain": the registry checks the type too, so a bad value gives one error at the field
        assert info.field_name is not None  # a field validator's
        registry.resolve(info.field_name, spec)
        return spec if isinstance(spec, str) else dict(spec)

    @model_validator(mode="after")
    def _consistent_sizes(self) -> ModelConfig:
        errors: list[tuple[str, str]] = []
        if self.head_dim is None and self.dim % self.n_heads:
            errors.append(
                (
                    "dim",
                    f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads}), "
                    "or head_dim must be set",
                )
            )
        elif self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            errors.append(
                (
                    "n_kv_heads",
                    f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})",
                )
            )
        if not errors:
            for slot in ("norm", "position", "attention", "mlp"):
                try:
                    registry.check_dims(slot, getattr(self, slot), **self.slot_dims(slot))
                    registry.check_interface(slot, getattr(self, slot), *self.slot_dims(slot))
                except registry.RegistryError as err:
                    errors.append((slot, str(err)))
            try:
                registry.check_interface("block", self.block, *BLOCK_PARTS)
            except registry.RegistryError as err:
                errors.append(("block", str(err)))
        if errors:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("model_config", "{reason}", {"reason": reason}),
                        loc=(field,),
                        input=getattr(self, field),
                    )
                    for field, reason in errors
                ],
            )
        return self

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and LM head: vocab_size rounded up to pad_vocab_multiple."""
        return -(-self.vocab_size // self.pad_vocab_multiple) * self.pad_vocab_multiple

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.dim // self.n_heads

    def slot_dims(self, slot: str) -> dict[str, Any]:
        """The structural sizes the model passes to the `slot` component (not for blocks)."""
        sizes: dict[str, dict[str, Any]] = {
            "norm": {"dim": self.dim},
            "position": {
                "dim": self.dim,
                "head_dim": self.resolved_head_dim,
                "max_seq_len": self.max_seq_len,
            },
            "attention": {
                "dim": self.dim,
                "n_heads": self.n_heads,
                "n_kv_heads": self.n_kv_heads,
                "head_dim": self.resolved_head_dim,
                "dropout": self.dropout,
            },
            "mlp": {"dim": self.dim, "dropout": self.dropout},
        }
        return sizes[slot]

    def component(self, slot: str) -> tuple[str, dict[str, Any]]:
        """Canonical name and options (defaults filled in) of `slot`, e.g. ("rope", {"style": ...})."""
        return registry.resolve(slot, getattr(self, slot))

    def _count(self, slot: str, active: bool = False) -> int:
        return registry.count_params(
            slot, getattr(self, slot), active=active, **self.slot_dims(slot)
        )

    def _body_params(self, active: bool) -> int:
        """Parameters of the blocks and the final norm."""
        block = registry.declaration("block", self.component("block")[0])
        assert issubclass(block, BlockDeclaration)
        norm = self._count("norm")
        per_layer = self._count("attention") + self._count("mlp", active) + block.n_norms * norm
        return self.n_layers * per_layer + (norm if block.final_norm else 0)

    def _embedding_params(self) -> int:
        """Token embedding plus the position module's parameters (a learned table)."""
        return self.padded_vocab_size * self.dim + self._count("position")

    def _head_params(self) -> int:
        return 0 if self.tie_embeddings else self.padded_vocab_size * self.dim

    def num_params(self) -> int:
        """Exact parameter count of `MiniMindLM(self)`; tied embeddings counted once."""
        return self._embedding_params() + self._body_params(False) + self._head_params()

    def num_non_embedding_params(self) -> int:
        """Parameters of the blocks and the final norm: `num_params` less the token and position
        embeddings and an untied LM head (the N of scaling-law fits)."""
        return self._body_params(False)

    def num_active_params(self) -> int:
        """Parameters one token uses: as `num_params`, but MoE counts top_k + shared experts only."""
        return self._embedding_params() + self._body_params(True) + self._head_params()

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward + backward) per token at context `seq_len` (PaLM, appendix B).

        6·N + 12·n_layers·n_heads·head_dim·seq_len, where N counts the active non-embedding
        parameters (blocks and final norm) plus the LM head matmul (padded_vocab_size·dim, tied or
        not: the padded rows are computed too); the second term is the attention score and value
        matmuls over the full (unmasked) context.
        """
        n = self._body_params(True) + self.padded_vocab_size * self.dim
        attention = 12 * self.n_layers * self.n_heads * self.resolved_head_dim * seq_len
        return float(6 * n + attention)
