"""The training loop of one variant × seed: metrics, budgets, determinism, resume, failures."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from minimind.data import prepare_data
from minimind.spec import SpecError, TrainConfig, validate_spec
from minimind.training import metrics
from minimind.training.checkpoint import RunCheckpoint, load_checkpoint
from minimind.training.device import RunDevice, resolve_run_device
from minimind.training.optim import decay_start_step, lr_multiplier
from minimind.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


class Recorder:
    """A metric sink that keeps every point; optionally raises once `crash_at` is logged."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.points: dict[str, dict[int, float]] = {}
        self.crash_at = crash_at

    def log_metrics(self, metrics, step):
        if step == self.crash_at:
            raise RuntimeError(f"crash at step {step}")
        for key, value in metrics.items():
            assert step not in self.points.setdefault(key, {}), f"{key} logged twice at {step}"
            self.points[key][step] = value

    def flush(self, timeout=None):
        return True


@pytest.fixture
def make(tiny_spec):
    def build(seed: int = 0, **changes) -> Trainer:
        spec = validate_spec(tiny_spec(**changes))
        data = prepare_data(spec.data)
        model_cfg = spec.model_config_obj()
        device = resolve_run_device(spec.train, model_cfg.dim)
        return Trainer(model_cfg, spec.train, data, seed, device)

    return build


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_metrics_names_steps_and_values(make):
    trainer = make()
    sink = Recorder()
    outcome = trainer.fit(sink)
    assert outcome.status == "FINISHED" and outcome.step == 12 and outcome.tokens == 12 * 4 * 32
    logged = {"train/loss", "train/aux_loss", "opt/lr", "opt/grad_norm", "train/tokens"}
    logged |= {
        "time/elapsed_s",
        "time/first_step_s",
        "sys/peak_mem_mb",
        "perf/tokens_per_s",
        "perf/step_ms",
    }
    logged |= {"perf/mfu", "val/loss", "val/bpb", "val/loss_sampled", "val/bpb_sampled"}
    logged |= {"probe/spike/loss", "probe/spike/grad_norm", "probe/spike/count"}  # the guard
    assert set(sink.points) == logged  # no moe/load_cv for a dense model
    assert sorted(sink.points["train/loss"]) == [3, 6, 9, 12]
    assert sorted(sink.points["time/first_step_s"]) == [1]
    assert 0 < sink.points["time/first_step_s"][1] <= sink.points["time/elapsed_s"][3]
    assert sorted(sink.points["val/loss_sampled"]) == [6, 12]
    assert sorted(sink.points["val/loss"]) == [12]  # exact: once, at the end
    assert sorted(sink.points["perf/tokens_per_s"]) == [3, 6, 9, 12]  # steps 1-2 are warm-up
    assert sink.points["train/tokens"] == {s: s * 128 for s in (3, 6, 9, 12)}
    assert sink.points["train/aux_loss"] == {s: 0.0 for s in (3, 6, 9, 12)}
    # The lr logged at step s is the one step s used (0-based index s - 1).
    schedule = trainer.cfg.schedule
    for step, lr in sink.points["opt/lr"].items():
        assert lr == pytest.approx(3e-3 * lr_multiplier(step - 1, schedule, 12))
    # bpb from the exact byte count of the held-out text.
    data = trainer.data
    for step, loss in sink.points["val/loss_sampled"].items():
        expected = loss * len(data.val_tokens) / (math.log(2) * data.val_bytes)
        assert sink.points["val/bpb_sampled"][step] == pytest.approx(expected, rel=1e-12)
    expected = sink.points["val/loss"][12] * (len(data.val_tokens) - 1)
    assert sink.points["val/bpb"][12] == pytest.approx(expected / (math.log(2) * data.val_bytes))
    assert outcome.val_loss == sink.points["val/loss"][12]
    assert outcome.val_bpb == sink.points["val/bpb"][12]
    assert 0 < sink.points["perf/mfu"][12] < 1
    elapsed = [sink.points["time/elapsed_s"][s] for s in (3, 6, 9, 12)]
    assert elapsed == sorted(elapsed) and elapsed[-1] == outcome.elapsed_s
    assert [s for s, _ in outcome.history["train/loss"]] == [3, 6, 9, 12]


@pytest.mark.parametrize(
    "optimizer",
    [{"lr": 1e-2}, {"name": "muon", "lr": 0.05, "adamw_lr": 1e-2}],
    ids=["adamw", "muon"],
)
def test_loss_falls_and_samples_are_text(make, optimizer):
    outcome = make(train={"steps": 30, "optimizer": optimizer}).fit(Recorder())
    losses = [v for _, v in outcome.history["train/loss"]]
    assert losses[-1] < losses[0] - 0.5  # from about ln(320) = 5.8
    assert len(outcome.samples) == 3
    for sample in outcome.samples:
        assert sample.prompt and sample.completion and isinstance(sample.completion, str)


def test_same_seed_gives_the_same_curve_and_weights_bit_for_bit(make):
    a, b, c = make(seed=0), make(seed=0), make(seed=1)
    runs = [(t, t.fit(Recorder())) for t in (a, b, c)]
    (ta, oa), (tb, ob), (tc, oc) = runs
    assert oa.history == ob.history
    assert [s.completion for s in oa.samples] == [s.completion for s in ob.samples]
    assert_same_weights(weights(ta), weights(tb))
    assert oa.history["train/loss"] != oc.history["train/loss"]


MUP = {"dim": 64, "parametrization": {"name": "mup", "base_width": 32}}  # groups at their own lrs


@pytest.mark.parametrize(
    ("train", "model"),
    [
        ({"optimizer": {"name": "adamw"}}, {}),
        ({"optimizer": {"name": "muon", "lr": 0.02}, "z_loss": 1e-3}, {}),
        ({"optimizer": {"name": "sgd", "lr": 0.1}}, {}),
        ({"optimizer": {"name": "adamw"}}, MUP),
        ({"optimizer": {"name": "muon", "lr": 0.02}}, MUP),
    ],
    ids=["adamw", "muon-z_loss", "sgd", "adamw-mup", "muon-mup"],
)
def test_resume_from_a_checkpoint_continues_bit_for_bit(make, tmp_path, train, model):
    path = tmp_path / "last.pt"
    settings = {"train": train, "model": model}
    reference = make(**settings)
    reference_sink = Recorder()
    reference_outcome = reference.fit(reference_sink)

    crashed = make(**settings)
    owned = RunCheckpoint(path, {"child": "abc"})
    with pytest.raises(RuntimeError, match="crash at step 9"):
        crashed.fit(Recorder(crash_at=9), owned)
    state = load_checkpoint(owned.file)  # weights_only=True; under the run's id
    assert state["step"] == 6 and state["run_ids"] == {"child": "abc"}  # stamped by its owner
    assert "run_ids" not in crashed.state_dict()  # the trainer's own state holds no run ids

    resumed = make(**settings)
    resumed.load_state_dict(state)
    sink = Recorder()
    outcome = resumed.fit(sink, RunCheckpoint(path))
    assert sorted(sink.points["train/loss"]) == [9, 12]
    keys = ["train/loss", "opt/lr", "opt/grad_norm", "val/loss", "val/bpb"]
    for key in keys + (["train/z_loss"] if "z_loss" in train else []):
        for step, value in sink.points[key].items():
            assert value == reference_sink.points[key][step], (key, step)
    assert outcome.history == reference_outcome.history
    assert_same_weights(weights(resumed), weights(reference))
    assert load_checkpoint(path)["step"] == 12  # the final state is saved too


def test_checkpoint_every_null_writes_no_checkpoint(make, tmp_path):
    path = tmp_path / "last.pt"
    make(train={"checkpoint_every": None}).fit(Recorder(), RunCheckpoint(path))
    assert not path.exists()


def test_non_finite_loss_ends_the_run_failed(make):
    trainer = make()
    with torch.no_grad():
        trainer.model.embed_tokens.weight.fill_(math.nan)
    sink = Recorder()
    outcome = trainer.fit(sink)
    assert outcome.status == "FAILED" and outcome.step == 3
    assert "non-finite train/loss" in outcome.failure_reason
    assert "train/loss" not in sink.points and outcome.samples == []


def test_budget_is_the_first_of_steps_tokens_and_time(make):
    trainer = make(train={"steps": 12, "tokens": 300})
    assert trainer.budget.max_steps == 3  # ceil(300 / (4 * 32))
    assert trainer.fit(Recorder()).step == 3
    timed = make(train={"steps": None, "time_limit": 1e-6, "log_every": 100})
    assert timed.budget.max_steps is None
    outcome = timed.fit(Recorder())
    assert outcome.step == 1 and outcome.val_loss is not None  # the last step logs and evaluates


def test_planned_steps():
    by_tokens = TrainConfig(steps=None, tokens=1000, batch_size=4, seq_len=32)  # 128 a step
    assert by_tokens.planned_steps == 8
    assert by_tokens.model_copy(update={"steps": 5}).planned_steps == 5
    assert TrainConfig(steps=None, time_limit=60.0).planned_steps is None


def test_grad_accum_and_no_clip(make):
    sink = Recorder()
    make(train={"grad_accum": 2, "grad_clip": None, "steps": 6}).fit(sink)
    assert sink.points["train/tokens"] == {3: 3 * 2 * 128, 6: 6 * 2 * 128}
    assert all(v > 0 for v in sink.points["opt/grad_norm"].values())


def test_chunked_loss_trains_the_same_curve_as_the_whole_logits(make):
    changes = {"steps": 6, "precision": "fp32", "eval_every": 3}
    plain = make(train=changes).fit(Recorder())
    chunked = make(train={**changes, "loss_chunk_tokens": 48}).fit(Recorder())
    for key in ("train/loss", "val/loss"):
        assert [s for s, _ in chunked.history[key]] == [s for s, _ in plain.history[key]]
        got = [v for _, v in chunked.history[key]]
        want = [v for _, v in plain.history[key]]
        assert got == pytest.approx(want, rel=1e-5), key


def test_moe_logs_expert_balance(make):
    sink = Recorder()
    make(model={"mlp": {"name": "moe", "n_experts": 4, "top_k": 2}}, train={"steps": 3}).fit(sink)
    assert sink.points["train/aux_loss"][3] > 0
    assert 0 <= sink.points["moe/load_cv"][3] <= math.sqrt(3)


def test_z_loss_is_logged_and_trained_on(make):
    sink, plain = Recorder(), Recorder()
    make(train={"steps": 3, "log_every": 1, "z_loss": 0.05}).fit(sink)
    make(train={"steps": 3, "log_every": 1}).fit(plain)
    assert "train/z_loss" in sink.points and "train/z_loss" not in plain.points
    assert sink.points["train/z_loss"][1] > 0
    assert sink.points["train/loss"][1] == plain.points["train/loss"][1]  # same first batch
    assert sink.points["train/loss"][3] != plain.points["train/loss"][3]  # a different objective


def test_cpu_batches_are_not_pinned_even_where_cuda_exists(make):
    # Pinned by the run's device (`minimind.training.device.pins_memory`), not by whether CUDA exists.
    trainer = make(train={"device": "cpu"})
    assert trainer.device == torch.device("cpu")
    assert not next(trainer.batches).is_pinned()
    assert not any(batch.is_pinned() for batch in trainer.evaluation.val_batches)


def test_the_trainer_autocasts_to_the_dtype_it_is_handed(tiny_spec):
    """The dtype is derived once, with the device (`resolve_run_device`): the trainer takes it
    as handed down, whatever `train.precision` would resolve to again."""
    spec = validate_spec(tiny_spec(train={"precision": "fp32"}))
    handed = RunDevice(torch.device("cpu"), torch.bfloat16)
    trainer = Trainer(spec.model_config_obj(), spec.train, prepare_data(spec.data), 0, handed)
    assert trainer.amp_dtype == trainer.evaluation.amp_dtype == torch.bfloat16
    assert math.isfinite(trainer.fit(Recorder()).val_loss)


def test_bf16_autocast_trains_on_the_cpu(make):
    trainer = make(train={"precision": "bf16", "steps": 3})
    assert trainer.amp_dtype == torch.bfloat16
    assert math.isfinite(trainer.fit(Recorder()).val_loss)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mfu_of_every_precision_divides_by_the_devices_one_peak(
    make, monkeypatch, tmp_path, precision
):
    """fp32 and bf16 runs of the same work report the same MFU per token/s: the peak is the
    best matmul of any precision, not one in the run's own (which credited fp32 runs ~3x)."""
    monkeypatch.setenv("MINIMIND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(metrics, "cpu_has_native_bf16", lambda: True)
    peaks = {torch.float32: 1e11, torch.bfloat16: 4e11}
    monkeypatch.setattr(metrics, "measure_matmul_flops", lambda device, dtype, s: peaks[dtype])
    monkeypatch.setattr(metrics, "_MEASURED_THIS_PROCESS", {})
    sink = Recorder()
    trainer = make(train={"precision": precision, "steps": 6})
    trainer.fit(sink)
    achieved = sink.points["perf/tokens_per_s"][6] * trainer.perf.flops_per_token
    assert sink.points["perf/mfu"][6] == pytest.approx(achieved / 4e11)


def test_evaluation_follows_eval_every_not_log_every(make):
    sink = Recorder()
    make(train={"eval_every": 4, "log_every": 5, "steps": 12}).fit(sink)
    assert sorted(sink.points["val/loss_sampled"]) == [4, 8, 12]
    assert sorted(sink.points["train/loss"]) == [5, 10, 12]
    assert sorted(sink.points["train/tokens"]) == [4, 5, 8, 10, 12]


def _batches_seen(make, monkeypatch, seed: int, **changes) -> tuple[list[torch.Tensor], Trainer]:
    """Train a run to the end and return every training batch it drew, in order."""
    from minimind.data.batches import TrainBatches

    seen: list[torch.Tensor] = []
    draw = TrainBatches.__next__

    def record(self):
        batch = draw(self)
        seen.append(batch.clone())
        return batch

    monkeypatch.setattr(TrainBatches, "__next__", record)
    trainer = make(seed, **changes)
    assert trainer.fit(Recorder()).status == "FINISHED"
    monkeypatch.setattr(TrainBatches, "__next__", draw)
    return seen, trainer


def test_the_same_seed_gives_two_variants_the_same_batches(make, monkeypatch):
    """What `compare --paired` relies on: seed k of every variant sees the same batches in the
    same order; another seed sees others; `train.data_seed` fixes the order across seeds
    while the initialisation still follows the seed."""
    ln, ln_trainer = _batches_seen(make, monkeypatch, 0, model={"norm": "layernorm"})
    rms, _ = _batches_seen(make, monkeypatch, 0, model={"norm": "rmsnorm"})
    other, _ = _batches_seen(make, monkeypatch, 1, model={"norm": "rmsnorm"})
    assert len(ln) == len(rms) == 12
    assert all(torch.equal(a, b) for a, b in zip(ln, rms, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(ln, other, strict=True))
    fixed0, t0 = _batches_seen(make, monkeypatch, 0, train={"data_seed": 7})
    fixed1, t1 = _batches_seen(make, monkeypatch, 1, train={"data_seed": 7})
    assert all(torch.equal(a, b) for a, b in zip(fixed0, fixed1, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(fixed0, ln, strict=True))
    emb = "embed.weight" if "embed.weight" in weights(t0) else next(iter(weights(t0)))
    assert not torch.equal(weights(t0)[emb], weights(t1)[emb])  # the init follows the seed


def test_the_final_evaluation_scores_every_held_out_token(make):
    """val/loss at the end is the mean over every token of the split but its first, each scored
    once with its window's context: recomputed here token by token with log_softmax."""
    from minimind.data.batches import exact_val_windows

    trainer = make(train={"steps": 4, "eval_every": 4})
    sink = Recorder()
    trainer.fit(sink)
    tokens = trainer.data.val_tokens
    windows = exact_val_windows(tokens, trainer.cfg.seq_len, trainer.cfg.batch_size)
    targets = torch.cat([y.flatten() for _, y in windows])
    assert torch.equal(targets, torch.from_numpy(tokens[1:].astype("int64")))  # each once
    length, total = trainer.cfg.seq_len, 0.0
    trainer.model.eval()
    with torch.no_grad():
        for start in range(0, len(tokens) - 1, length):
            x = torch.from_numpy(tokens[start : start + length].astype("int64"))
            y = torch.from_numpy(tokens[start + 1 : start + length + 1].astype("int64"))
            x = x[: len(y)]  # the tail: as many inputs as targets
            logp = torch.log_softmax(trainer.model(x[None]).logits[0].double(), dim=-1)
            total -= logp[torch.arange(len(y)), y].sum().item()
    expected = total / (len(tokens) - 1)
    assert (len(tokens) - 1) % length != 0  # the split has a tail, so it is tested
    assert sink.points["val/loss"][4] == pytest.approx(expected, rel=1e-5)
    bpb = total / (math.log(2) * trainer.data.val_bytes)
    assert sink.points["val/bpb"][4] == pytest.approx(bpb, rel=1e-5)
    assert sink.points["val/loss_sampled"][4] != sink.points["val/loss"][4]


def test_unset_warmup_follows_the_run_length():
    # A default must not make a short run invalid: 20 steps get 2 warm-up steps, not 30.
    assert TrainConfig(steps=20).warmup_steps == 2
    assert TrainConfig(steps=20).resolved_schedule.warmup == 2
    assert TrainConfig(steps=None, tokens=1000, batch_size=4, seq_len=32).warmup_steps == 0
    assert TrainConfig(steps=10**6).warmup_steps == 1000  # capped
    assert TrainConfig(steps=None, time_limit=60.0).warmup_steps == 30
    assert TrainConfig(steps=20, schedule={"warmup": 7}).warmup_steps == 7  # as written


def test_eval_average_last_logs_the_mean_of_the_last_estimates(make):
    sink = Recorder()
    make(train={"eval_every": 3, "steps": 12, "eval_average_last": 3}).fit(sink)
    sampled = sink.points["val/bpb_sampled"]
    assert sorted(sampled) == [3, 6, 9, 12]
    assert sink.points["val/bpb_avg3"] == {
        12: pytest.approx(sum(sampled[s] for s in (6, 9, 12)) / 3, rel=1e-12)
    }
    losses = sink.points["val/loss_sampled"]
    assert sink.points["val/loss_avg3"] == {
        12: pytest.approx((losses[6] + losses[9] + losses[12]) / 3, rel=1e-12)
    }
    plain = Recorder()
    make(train={"eval_every": 3, "steps": 12}).fit(plain)
    assert not [name for name in plain.points if "_avg" in name]


def test_eval_average_last_needs_that_many_evaluations(tiny_spec):
    with pytest.raises(
        SpecError, match=r"train\.eval_average_last: must be at most the run's 3 evaluations"
    ):
        validate_spec(tiny_spec(train={"eval_every": 5, "steps": 12, "eval_average_last": 4}))


class Fork:
    """A fork writer that keeps the state it is given."""

    def __init__(self) -> None:
        self.state: dict | None = None

    def save(self, state) -> None:
        self.state = copy.deepcopy(dict(state))


@pytest.mark.parametrize("budget", [6, 9])
def test_a_budget_branch_equals_the_plain_wsd_run_of_its_steps_bit_for_bit(make, budget):
    """One run to 12 steps forks at each shorter budget's decay start; a branch continued
    from the fork is the plain wsd run of that many steps: weights, logged metrics, all."""
    schedule = {"name": "wsd", "warmup": 2, "decay_fraction": 0.34}
    train = {"steps": 12, "eval_every": 3, "log_every": 2, "schedule": schedule}
    fork_at = decay_start_step(budget, make(train=train).cfg.resolved_schedule)
    assert 2 < fork_at < budget
    fork = Fork()
    trunk = make(train=train)
    trunk.fit(Recorder(), forks={fork_at: fork})
    assert fork.state is not None and fork.state["step"] == fork_at

    plain, plain_sink = make(train={**train, "steps": budget}), Recorder()
    plain_outcome = plain.fit(plain_sink)
    branch, branch_sink = make(train={**train, "steps": budget}), Recorder()
    branch.start_branch(fork.state)
    branch_outcome = branch.fit(branch_sink)
    assert_same_weights(weights(branch), weights(plain))
    assert branch_outcome.val_bpb == plain_outcome.val_bpb and branch_outcome.step == budget
    for name, points in branch_sink.points.items():  # the branch logs from its fork on
        if not name.startswith(("perf/", "time/", "sys/")):
            assert points == {s: v for s, v in plain_sink.points[name].items() if s > fork_at}, name
    assert trunk.step == 12
