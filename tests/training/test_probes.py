"""Training probes and the spike and NaN guard (minimind/training/probes): each measurement against a
hand computation on a tiny model, the guard on injected spikes and NaNs, resume and compile
with probes on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minimind.data import prepare_data
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.spec import spec_hash, validate_spec
from minimind.training.checkpoint import RunCheckpoint, load_checkpoint
from minimind.training.device import resolve_run_device
from minimind.training.probes.activations import forward_probes
from minimind.training.probes.groups import ParameterGroups
from minimind.training.probes.guard import MIN_HISTORY, SpikeWindow
from minimind.training.probes.monitor import PROBE_ROWS, grad_norms
from minimind.training.probes.stats import (
    attention_stats,
    output_stats,
    parameter_group,
    query_positions,
)
from minimind.training.trainer import Trainer
from tests.training.test_train import Recorder, assert_same_weights, weights

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 64}


def tiny_model(**changes) -> MiniMindLM:
    torch.manual_seed(0)
    return MiniMindLM(ModelConfig(max_seq_len=16, **{**TINY, **changes}))


@pytest.fixture
def make(tiny_spec):
    def build(seed: int = 0, **changes) -> Trainer:
        spec = validate_spec(tiny_spec(**changes))
        return Trainer(
            spec.model_config_obj(),
            spec.train,
            prepare_data(spec.data),
            seed,
            resolve_run_device(spec.train, spec.model_config_obj().dim),
        )

    return build


def probes(sink: Recorder) -> dict[str, dict[int, float]]:
    return {k: v for k, v in sink.points.items() if k.startswith("probe/")}


# The measurements -----------------------------------------------------------------------


def test_parameter_groups_of_every_kind_of_parameter():
    cases = {
        "embed_tokens.weight": ("embedding", None),
        "position.weight": ("embedding", None),
        "layers.3.attn.q_proj.weight": ("attention", 3),
        "layers.0.attn.k_norm.weight": ("norms", 0),
        "layers.1.attn_norm.weight": ("norms", 1),
        "layers.1.mlp.experts.0.w1": ("mlp", 1),
        "layers.2.mlp.router.weight": ("mlp", 2),
        "norm.weight": ("norms", None),
        "lm_head.weight": ("head", None),
    }
    for name, expected in cases.items():
        assert parameter_group(name) == expected, name
    assert parameter_group("extra.weight") == ("other", None)  # a plugin's: still grouped


def test_forward_probes_match_a_hand_computation():
    model = tiny_model(tie_embeddings=False)
    x = torch.randint(0, 64, (3, 16))
    measured = forward_probes(model, x, None, queries=4)
    # the same forward by hand, block by block
    with torch.no_grad():
        positions = torch.arange(16)
        hidden = model.embed_tokens(x)
        rotate = model.position.rotation(positions)
        for i, layer in enumerate(model.layers):
            before = hidden
            normed = layer.attn_norm(hidden)
            q, k, _ = layer.attn.project(normed, rotate)
            top, entropy = _attention_by_hand(q, k, [8, 10, 13, 15])
            assert measured[f"attn_max_logit/layer{i}"].item() == pytest.approx(top, rel=1e-5)
            assert measured[f"attn_entropy/layer{i}"].item() == pytest.approx(entropy, rel=1e-5)
            hidden = layer(hidden, rotate)
            resid = math.sqrt(float((hidden.double() ** 2).mean()))
            gain = resid / math.sqrt(float((before.double() ** 2).mean()))
            assert measured[f"resid_rms/layer{i}"].item() == pytest.approx(resid, rel=1e-5)
            assert measured[f"block_gain/layer{i}"].item() == pytest.approx(gain, rel=1e-5)
        logits = model.lm_head(model.norm(hidden)).double().numpy()
    lse = np.log(np.exp(logits).sum(-1)).mean()
    assert measured["out_max_logit"].item() == pytest.approx(logits.max(), rel=1e-5)
    assert measured["out_lse"].item() == pytest.approx(lse, rel=1e-5)
    assert not any(key.startswith("moe_load") for key in measured)
    assert model.training and not model.layers[0]._forward_hooks  # restored, hooks removed


def _attention_by_hand(q: torch.Tensor, k: torch.Tensor, queries: list[int]) -> tuple[float, float]:
    """Max logit and mean entropy with explicit loops: query head h reads key head h // 2."""
    batch, heads, _, head_dim = q.shape
    top, entropies = -math.inf, []
    for b in range(batch):
        for h in range(heads):
            for t in queries:
                logits = [
                    float(q[b, h, t] @ k[b, h // 2, j]) / math.sqrt(head_dim) for j in range(t + 1)
                ]
                top = max(top, *logits)
                p = np.exp(np.array(logits) - max(logits))
                p /= p.sum()
                entropies.append(float(-(p * np.log(p)).sum()))
    return top, float(np.mean(entropies))


def test_attention_probabilities_are_the_ones_attention_uses():
    """The probe's scores, softmaxed, reproduce SDPA's output: same scale, heads and mask."""
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 12, 8), torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8)
    queries = query_positions(12, 3, q.device)
    assert queries.tolist() == [6, 8, 11]  # linspace(6, 11, 3), rounded half to even
    ids = torch.tensor([[0] * 8 + [1] * 4, [0] * 12])
    allowed = (ids[:, :, None] == ids[:, None, :]) & torch.ones(12, 12, dtype=torch.bool).tril()
    allowed = allowed[:, None]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    scores = q[:, :, queries] @ k.repeat_interleave(2, 1).transpose(-1, -2) / math.sqrt(8)
    scores = scores.masked_fill(~allowed[:, :, queries], -math.inf)
    p = scores.softmax(-1)
    got = p @ v.repeat_interleave(2, 1)
    torch.testing.assert_close(got, expected[:, :, queries])
    top, entropy = attention_stats(q, k, queries, allowed)
    assert top.item() == pytest.approx(scores.amax().item())
    plogp = torch.where(p > 0, p * p.log(), 0.0)
    assert entropy.item() == pytest.approx(-plogp.sum(-1).mean().item(), rel=1e-6)


def test_output_stats():
    logits = torch.tensor([[[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]]])
    top, lse = output_stats(logits)
    rows = [math.log(1 + math.e + math.e**2), math.log(math.e**3 + math.e**-1 + math.e**0.5)]
    assert top.item() == 3.0 and lse.item() == pytest.approx(sum(rows) / 2)


def test_moe_load_is_probed_per_expert():
    model = tiny_model(mlp={"name": "moe", "n_experts": 4, "top_k": 2})
    measured = forward_probes(model, torch.randint(0, 64, (2, 16)), None, queries=4)
    for layer in range(2):
        shares = [measured[f"moe_load/layer{layer}/expert{e}"].item() for e in range(4)]
        assert sum(shares) == pytest.approx(1.0)
        assert shares == pytest.approx(model.moe_load()[layer].tolist())


def test_gradient_rms_and_update_ratio_per_group_by_hand():
    model = tiny_model(tie_embeddings=False)
    groups = ParameterGroups(model, torch.device("cpu"))
    assert groups.rows == ["embedding", "attention", "mlp", "norms", "head", "layer0", "layer1"]
    x = torch.randint(0, 64, (2, 16))
    model(x, labels=x).loss.backward()
    params = list(model.parameters())
    norms, total = grad_norms(params)
    grads = [p.grad for p in params]
    assert total.item() == torch.nn.utils.get_total_norm(grads).item()
    rms = dict(zip(groups.rows, groups.rms(norms).tolist(), strict=True))
    named = list(model.named_parameters())
    for row in groups.rows:
        members = [p.grad for n, p in named if row in (parameter_group(n)[0], _layer(n))]
        squares = sum(float((g.double() ** 2).sum()) for g in members)
        count = sum(g.numel() for g in members)
        assert rms[row] == pytest.approx(math.sqrt(squares / count), rel=1e-5), row
    before = [p.detach().clone() for p in params]
    torch.optim.SGD(params, lr=0.1).step()
    delta = torch.stack([(p - b).norm() for p, b in zip(params, before, strict=True)])
    weight = torch.stack([b.norm() for b in before])
    ratios = (groups.sums(delta**2) / groups.sums(weight**2)).sqrt().tolist()
    head = groups.rows.index("head")
    w, g = before[-1], model.lm_head.weight.grad
    assert ratios[head] == pytest.approx(float((0.1 * g).norm() / w.norm()), rel=1e-5)


def _layer(name: str) -> str | None:
    layer = parameter_group(name)[1]
    return f"layer{layer}" if layer is not None else None


def test_clipping_with_the_guards_norm_gives_clip_grad_norm_s_bits():
    a, b = tiny_model(), tiny_model()
    x = torch.randint(0, 64, (2, 16))
    for model in (a, b):
        model(x, labels=x).loss.backward()
    torch.nn.utils.clip_grad_norm_(list(a.parameters()), 0.01, foreach=True)
    params = list(b.parameters())
    torch.nn.utils.clip_grads_with_norm_(params, 0.01, grad_norms(params)[1], foreach=True)
    for pa, pb in zip(a.parameters(), params, strict=True):
        assert torch.equal(pa.grad, pb.grad)


def test_spike_score_against_numpy():
    window = SpikeWindow(10, torch.device("cpu"))
    values = [1.0, 2.0, 4.0, 3.0, 5.0, 1.5, 2.5, 3.5, 2.0, 4.5, 3.0, 20.0, 2.0, 1.0, 2.5]
    for i, value in enumerate(values):
        score = window.score(torch.tensor(value)).item()
        window.push(torch.tensor(value))
        kept = values[max(0, i - 10) : i]
        if len(kept) < MIN_HISTORY:
            assert math.isnan(score)
        else:
            expected = (value - np.mean(kept)) / np.std(kept, ddof=1)
            assert score == pytest.approx(expected, rel=1e-5), i


# The trainer ----------------------------------------------------------------------------


def test_probes_log_every_probe_every_steps_and_change_nothing(make):
    plain_sink, probed_sink = Recorder(), Recorder()
    plain, probed = make(), make(train={"probe_every": 4})
    plain_outcome, probed_outcome = plain.fit(plain_sink), probed.fit(probed_sink)
    assert probed_outcome.history == plain_outcome.history
    assert_same_weights(weights(plain), weights(probed))
    measured = probes(probed_sink)
    for key in ("resid_rms/layer0", "attn_max_logit/layer0", "grad_rms/attention"):
        assert sorted(measured[f"probe/{key}"]) == [4, 8, 12]
    assert sorted(measured["probe/update_ratio/mlp"]) == [4, 8, 12]
    # the guard: every log step once its window scores (MIN_HISTORY steps)
    assert sorted(measured["probe/spike/loss"]) == [9, 12]
    assert sorted(measured["probe/spike/count"]) == [3, 6, 9, 12]
    assert not any(k.startswith("probe/resid") for k in probes(plain_sink))


def test_probes_read_the_fixed_batch(make):
    trainer = make(train={"probe_every": 1, "steps": 1, "schedule": {"warmup": 0}})
    sink = Recorder()
    trainer.fit(sink)
    fresh = make()
    x = fresh.evaluation.val_batches[0][:PROBE_ROWS]
    expected = forward_probes(fresh.model, x, None, queries=32)
    got = sink.points["probe/out_lse"][1]
    assert got == pytest.approx(expected["out_lse"].item(), rel=1e-6)


def test_an_injected_nan_gradient_stops_the_run_naming_step_metric_and_group(make, tmp_path):
    path = tmp_path / "last.pt"
    trainer = make(train={"checkpoint_every": 2, "log_every": 4})
    steps = iter(range(1, 100))
    poison = trainer.model.layers[0].mlp.down_proj.weight  # an MLP matrix of layer 0

    def nan_at_step_5(grad: torch.Tensor) -> torch.Tensor:
        return grad * math.nan if next(steps) == 5 else grad

    poison.register_hook(nan_at_step_5)
    sink = Recorder()
    outcome = trainer.fit(sink, RunCheckpoint(path))
    assert outcome.status == "FAILED" and outcome.step == 6  # read before step 6's checkpoint
    assert outcome.failure_reason.startswith("non-finite opt/grad_norm at step 5")
    assert "mlp of layer 0 (layers.0.mlp." in outcome.failure_reason
    assert load_checkpoint(path)["step"] == 4  # the last good checkpoint, untouched
    assert max(sink.points["train/loss"]) == 4


def test_a_non_finite_loss_is_named_with_its_step(make):
    trainer = make()
    with torch.no_grad():
        trainer.model.embed_tokens.weight.fill_(math.nan)
    outcome = trainer.fit(Recorder())
    assert outcome.status == "FAILED" and outcome.step == 3
    assert outcome.failure_reason.startswith("non-finite train/loss at step 1")


def test_a_loss_spike_is_scored_and_skipped_when_asked(make):
    results = {}
    for skip in (False, True):
        trainer = make(train={"steps": 12, "spike": {"window": 8, "sigma": 3.0, "skip": skip}})
        calls = iter(range(1, 100))

        def blow_up_step_11(module, args, logits, calls=calls):
            # training forwards only (evaluation runs the head in eval mode)
            if module.training and next(calls) == 11:
                return logits * 50
            return logits

        trainer.model.lm_head.register_forward_hook(blow_up_step_11)
        sink = Recorder()
        trainer.fit(sink)
        results[skip] = (trainer, sink)
    _, sink = results[False]
    assert sink.points["probe/spike/loss"][12] > 3.0 and sink.points["probe/spike/count"][12] >= 1
    assert sink.points["probe/spike/grad_norm"][12] > 3.0
    assert "probe/spike/skipped" not in sink.points
    assert results[True][1].points["probe/spike/skipped"][12] == 1.0
    assert not torch.equal(
        results[False][0].model.embed_tokens.weight, results[True][0].model.embed_tokens.weight
    )


def test_resume_with_probes_continues_bit_for_bit(make, tmp_path):
    path = tmp_path / "last.pt"
    settings = {"train": {"probe_every": 2, "spike": {"window": 8}}}
    reference_sink = Recorder()
    reference = make(**settings)
    reference.fit(reference_sink)
    crashed = make(**settings)
    with pytest.raises(RuntimeError, match="crash at step 9"):
        crashed.fit(Recorder(crash_at=9), RunCheckpoint(path))
    state = load_checkpoint(path)
    assert state["step"] == 6 and state["guard"]["loss_window"]["count"] == 6
    resumed = make(**settings)
    resumed.load_state_dict(state)
    sink = Recorder()
    resumed.fit(sink, RunCheckpoint(path))
    for key, points in probes(sink).items():
        for step, value in points.items():
            assert value == reference_sink.points[key][step], (key, step)
    assert 9 in sink.points["probe/spike/loss"]  # the window came back: step 9 is scored
    assert_same_weights(weights(resumed), weights(reference))


@pytest.mark.slow
def test_a_compiled_model_trains_with_probes_on(make):
    eager_sink, compiled_sink = Recorder(), Recorder()
    make(train={"probe_every": 3, "steps": 6}).fit(eager_sink)
    make(train={"probe_every": 3, "steps": 6, "compile": True}).fit(compiled_sink)
    for key, points in probes(eager_sink).items():
        for step, value in points.items():
            assert compiled_sink.points[key][step] == pytest.approx(value, rel=1e-3, abs=1e-6)


def test_probe_settings_leave_the_spec_hash_alone_unless_spikes_skip(tiny_spec):
    base = spec_hash(validate_spec(tiny_spec()))
    assert spec_hash(validate_spec(tiny_spec(train={"probe_every": 5}))) == base
    assert spec_hash(validate_spec(tiny_spec(train={"spike": {"sigma": 4.0}}))) == base
    assert spec_hash(validate_spec(tiny_spec(train={"spike": {"skip": True}}))) != base


def test_the_dry_run_says_how_probes_run(write_spec):
    from minimind.run.plan import describe_plan, plan_run
    from minimind.spec import load_spec

    off = describe_plan(plan_run(load_spec(write_spec())))
    assert "probes: off (train.probe_every); spike guard: z > 6 over the last 128 steps" in off
    compiled = write_spec(train={"probe_every": 10, "compile": True, "spike": {"skip": True}})
    text = describe_plan(plan_run(load_spec(compiled)))
    assert "probes: every 10 steps under probe/ (an eager forward beside the compiled model" in text
    assert "spiking steps skipped (one host sync per step)" in text
