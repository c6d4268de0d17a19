"""Every fast path of the training step against its slow reference.

- `torch.compile` (inductor) against eager: the same losses, and no recompiles once the train and
  eval graphs exist (a Python-float lr or an eval batch must not trigger one per step);
- bf16 autocast against fp32: the same logits within bf16's precision;
- fused AdamW (the CUDA choice) against foreach (the CPU one): the same parameters;
- the step reads nothing back to the host (`.item()` only at logging intervals).

The grouped MoE dispatch against the expert loop is in test_moe.py.
"""

from __future__ import annotations

import functools
import shutil

import pytest
import torch

from minimind import MiniMindLM, ModelConfig
from minimind.data import prepare_data
from minimind.spec import validate_spec
from minimind.training.device import resolve_run_device
from minimind.training.optim import build_optimizer
from minimind.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__")


class Recorder:
    """A metric sink that keeps every point and the Dynamo graph count at each logged step."""

    def __init__(self) -> None:
        self.points: dict[str, dict[int, float]] = {}
        self.graphs: dict[int, int] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.points.setdefault(key, {})[step] = value
        self.graphs[step] = compiled_graphs()

    def flush(self, timeout: float | None = None) -> bool:
        return True


def compiled_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.fixture
def make(tiny_spec):
    def build(**changes) -> Trainer:
        spec = validate_spec(tiny_spec(**changes))
        data = prepare_data(spec.data)
        model_cfg = spec.model_config_obj()
        device = resolve_run_device(spec.train, model_cfg.dim)
        return Trainer(model_cfg, spec.train, data, 0, device)

    return build


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="inductor needs a C compiler on the CPU",
)
def test_compiled_training_matches_eager_and_never_recompiles(make):
    torch._dynamo.reset()
    train = {"steps": 8, "eval_every": 2, "log_every": 2, "checkpoint_every": None}
    eager, compiled = Recorder(), Recorder()
    make(train=train).fit(eager)
    make(train={**train, "compile": True}).fit(compiled)
    for key in ("train/loss", "val/loss_sampled", "val/loss"):
        for step, value in eager.points[key].items():
            assert compiled.points[key][step] == pytest.approx(value, rel=1e-4), (key, step)
    # One graph for training and one for evaluation (no_grad, eval mode) exist after the first
    # evaluation at step 2; three more evaluations and six steps with new lr floats add none.
    assert compiled.graphs[2] >= 2
    assert compiled.graphs[8] == compiled.graphs[2]


def test_dynamo_guards_hold_across_steps_evaluations_and_lr_changes(make, monkeypatch):
    """The same check as above with Dynamo's graph capture alone (no inductor), over more steps
    and a changing lr, at a fraction of the cost."""
    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    sink = Recorder()
    trainer = make(
        train={"steps": 24, "eval_every": 4, "log_every": 4, "compile": True, "grad_clip": 1.0}
    )
    trainer.fit(sink)
    assert sink.graphs[4] >= 2
    assert sink.graphs[24] == sink.graphs[4]
    lrs = {lr for _, lr in sorted(sink.points["opt/lr"].items())}
    assert len(lrs) > 3, "the schedule must actually change the lr during the check"


def test_bf16_autocast_logits_track_fp32():
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig.preset("tiny", vocab_size=512, max_seq_len=64)).eval()
    tokens = torch.randint(0, 512, (2, 64))
    with torch.no_grad():
        reference = model(tokens, labels=tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fast = model(tokens, labels=tokens)
    assert fast.logits.dtype == torch.bfloat16
    # bf16 keeps 8 bits of mantissa: logits of std ~0.1-1 agree to a few hundredths.
    torch.testing.assert_close(fast.logits.float(), reference.logits, atol=5e-2, rtol=5e-2)
    assert fast.loss.item() == pytest.approx(reference.loss.item(), rel=5e-3)


def test_fused_adamw_matches_foreach():
    """The fused kernel (chosen on CUDA) against the multi-tensor one (chosen on the CPU)."""
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=256, max_seq_len=32)
    models = [MiniMindLM(config) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    cfg = validate_spec({"name": "x", "train": {"optimizer": {"lr": 1e-2}}}).train.optimizer
    optimizers = [build_optimizer(models[0], cfg), build_optimizer(models[1], cfg, fused=True)]
    assert optimizers[0].defaults["foreach"] and optimizers[1].defaults["fused"]
    tokens = torch.randint(0, 256, (2, 32))
    for _ in range(3):
        for model, optimizer in zip(models, optimizers, strict=True):
            model(tokens, labels=tokens).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize(
    "mlp",
    [
        {"name": "swiglu"},
        pytest.param(
            {"name": "moe", "n_experts": 4, "top_k": 2, "dispatch": "grouped_mm"},
            marks=pytest.mark.skipif(
                not hasattr(torch.nn.functional, "grouped_mm"), reason="no grouped_mm"
            ),
        ),
    ],
)
def test_a_training_step_reads_nothing_back_to_the_host(make, monkeypatch, mlp):
    """On a GPU every read of a device value stalls the step; only logging steps may read."""
    trainer = make(model={"mlp": mlp}, train={"grad_clip": 1.0})
    trainer._train_step()  # warm-up: lazy state (AdamW's) is created
    # AdamW keeps its step counts on the CPU even for CUDA parameters (foreach, not capturable),
    # so reading those is no device sync; any other read is.
    step_counts = {id(state["step"]) for state in trainer.optimizer.state.values()}

    def guarded(name: str):
        read = getattr(torch.Tensor, name)

        def checked(self, *args, **kwargs):
            if id(self) not in step_counts:
                raise AssertionError(f"Tensor.{name} inside the training step")
            return read(self, *args, **kwargs)

        return checked

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, guarded(name))
    for _ in range(3):
        trainer._train_step()
