"""`minimind bench`: the alternation and pairing logic, memory accounting, and a quick run.

No timing is asserted anywhere: a benchmark reports speed, tests assert behaviour.
"""

import json
import math

import pytest
import torch

from minimind.bench import SUITES
from minimind.bench.context import CUDA_STEPS_PER_ROUND, BenchContext
from minimind.bench.results import Row, Target
from minimind.cli import main
from minimind.training.memory import persistent_bytes, tensor_bytes, transient_peak_bytes
from minimind.training.timing import (
    EventStopwatch,
    alternate,
    interleave,
    median,
    paired_ratio,
)


class ScriptedClock:
    """A clock that each candidate advances by its next scripted duration."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def candidate(self, name: str, durations: list[float], calls: list[str]):
        it = iter(durations)

        def fn() -> None:
            calls.append(name)
            self.now += next(it)

        return fn


def test_interleave_alternates_after_warmup_and_times_each_call():
    clock, calls = ScriptedClock(), []
    candidates = {
        "A": clock.candidate("A", [100.0, 1.0, 2.0, 3.0], calls),
        "B": clock.candidate("B", [100.0, 10.0, 20.0, 30.0], calls),
    }
    times = interleave(candidates, torch.device("cpu"), rounds=3, warmup=1, clock=clock)
    # warm-up A, B; then rounds A B, B A, A B: neither side always goes first
    assert calls == ["A", "B", "A", "B", "B", "A", "A", "B"]
    assert times == {"A": [1.0, 2.0, 3.0], "B": [10.0, 20.0, 30.0]}  # warm-up calls dropped


class FakeEvents:
    """CUDA events on a scripted GPU timeline: a step queues `duration` seconds of work; an event
    is recorded at the end of the queued work; only `synchronize` waits for it."""

    def __init__(self) -> None:
        self.queued_until = 0.0  # when the GPU finishes the work queued so far, in seconds
        self.syncs = 0

    def step(self, duration: float):
        def fn() -> None:
            self.queued_until += duration

        return fn

    def new_event(self):
        events = self

        class Event:
            at: float | None = None

            def record(self) -> None:
                self.at = events.queued_until

            def synchronize(self) -> None:
                events.syncs += 1

            def elapsed_time(self, end) -> float:
                return (end.at - self.at) * 1e3  # milliseconds, as torch.cuda.Event

        return Event()


def test_event_timing_waits_once_per_block_and_reports_the_median_per_step_time():
    gpu = FakeEvents()
    durations = iter([5.0] * 4 + [1.0] * 4 + [3.0] * 4 + [1.5] * 4)  # warm-up block, 3 rounds
    calls = []

    def step() -> None:
        calls.append(1)
        gpu.step(next(durations))()

    times = interleave(
        {"A": step},
        torch.device("cpu"),
        rounds=3,
        warmup=1,
        steps=4,
        watch=EventStopwatch(gpu.new_event),
    )
    assert len(calls) == 16  # (1 warm-up + 3 rounds) blocks of 4 consecutive steps
    assert gpu.syncs == 4  # one host wait per block, none between the steps of a block
    assert times == {"A": [1.0, 3.0, 1.5]}  # block time / steps
    assert median(times["A"]) == 1.5


def test_wall_clock_blocks_divide_by_the_steps():
    clock, calls = ScriptedClock(), []
    fn = clock.candidate("A", [4.0, 4.0, 1.0, 3.0, 2.0, 2.0], calls)
    times = interleave({"A": fn}, torch.device("cpu"), rounds=2, warmup=1, clock=clock, steps=2)
    assert times == {"A": [2.0, 2.0]}  # (1 + 3) / 2, (2 + 2) / 2


def test_steps_per_round_default_to_blocks_on_cuda_only():
    assert BenchContext(torch.device("cpu")).steps == 1
    assert BenchContext(torch.device("cuda")).steps == CUDA_STEPS_PER_ROUND
    assert BenchContext(torch.device("cuda"), steps_per_round=3).steps == 3


def test_alternate_rotates_the_order_and_keeps_the_seconds_each_timer_reports():
    calls = []

    def timer(name, seconds):
        def call():
            calls.append(name)
            return seconds[len([c for c in calls if c == name]) - 1]

        return call

    timers = {
        "x": timer("x", [9.0, 1.0, 2.0, 3.0]),
        "y": timer("y", [9.0, 4.0, 5.0, 6.0]),
        "z": timer("z", [9.0, 7.0, 8.0, 9.5]),
    }
    times = alternate(timers, rounds=3, warmup=1)
    assert calls == ["x", "y", "z", "x", "y", "z", "y", "z", "x", "z", "x", "y"]
    assert times == {"x": [1.0, 2.0, 3.0], "y": [4.0, 5.0, 6.0], "z": [7.0, 8.0, 9.5]}


def test_paired_ratio_is_the_median_of_per_round_ratios():
    # Round 3 slowed B alone (another process woke up); pairing ignores it, the ratio of
    # medians (8 / 1) would not.
    a = [1.0, 1.0, 1.0, 4.0, 4.0]
    b = [2.0, 2.0, 8.0, 8.0, 8.0]
    assert paired_ratio(b, a) == 2.0
    assert paired_ratio(a, b) == 0.5
    # A machine twice as slow in some rounds scales both sides: the ratio stays exact.
    assert paired_ratio([3.0, 6.0, 3.0, 6.0, 6.0], [1.0, 2.0, 1.0, 2.0, 2.0]) == 3.0


def test_paired_ratio_rejects_unpaired_rounds():
    with pytest.raises(ValueError):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_ratio([], [])
    with pytest.raises(ValueError):
        alternate({"x": lambda: 1.0}, rounds=0)


@pytest.mark.parametrize(
    ("target", "value", "met"),
    [
        (Target(">=", 1.0), 1.0, True),
        (Target(">=", 1.0), 0.99, False),
        (Target("<=", 2.0), 2.5, False),
        (Target("<", 1.0), 0.5, True),
        (Target("<", 1.0), 1.0, False),
        (Target(">=", 1.0), math.nan, False),
    ],
)
def test_targets_are_checked_not_asserted(target, value, met):
    row = Row("suite", "case", value, "x", target)
    assert row.met is met
    assert row.to_json()["target"] == str(target)
    assert Row("suite", "case", value, "x").met is None


def test_transient_peak_counts_the_steps_own_allocations_only():
    old = torch.ones(3_000_000)  # 12 MB from before the step, freed inside it

    def step() -> None:
        nonlocal old
        old = None
        a = torch.empty(1_000_000)  # 4 MB
        b = torch.empty(2_000_000)  # 8 MB, while `a` lives: the peak, 12 MB
        del a, b
        torch.empty(500_000)  # 2 MB after both are freed

    peak = transient_peak_bytes(step, torch.device("cpu"))
    assert 12_000_000 <= peak < 12_100_000


def test_persistent_bytes_count_each_storage_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied: one 10x4 storage
    optimizer = torch.optim.AdamW(model.parameters())
    assert persistent_bytes(model, optimizer) == 10 * 4 * 4
    model(torch.tensor([1, 2])).sum().backward()
    optimizer.step()  # + grad, exp_avg, exp_avg_sq (and a 0-dim step count)
    expected = 4 * 10 * 4 * 4 + tensor_bytes([optimizer.state[model[0].weight]["step"]])
    assert persistent_bytes(model, optimizer) == expected


@pytest.mark.filterwarnings("ignore")
def test_quick_bench_of_every_suite_prints_and_writes_the_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINIMIND_CACHE_DIR", str(tmp_path / "cache"))  # the matmul peak cache
    monkeypatch.chdir(tmp_path)  # a relative write (results/...) would land here
    threads = torch.get_num_threads()
    out = tmp_path / "bench.json"
    try:
        code = main(["bench", "--quick", "--threads", "1", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert code == 0
    report = json.loads(out.read_text())
    assert report["failures"] == {}
    assert report["settings"]["quick"] is True and report["settings"]["threads"] == 1
    assert report["machine"]["cpu_count"] >= 1
    rows = report["rows"]
    assert {row["suite"] for row in rows} == set(SUITES)
    for row in rows:
        assert set(row) == {"suite", "case", "value", "unit", "target", "met", "detail"}
        assert math.isfinite(row["value"]), row
        if row["unit"] in ("x", "s", "MB/s"):  # ratios and rates; overhead (%) may dip below 0
            assert row["value"] > 0, row
        assert (row["met"] is None) == (row["target"] is None), row
        assert row["case"] in printed
    targeted = {row["suite"] for row in rows if row["target"]}
    assert targeted == {"model", "moe", "overhead", "generate", "data"}
    # Nothing but the report and, where the device's peak is measured rather than known from a
    # datasheet (the CPU, not a known GPU), the peak cache.
    assert {p.name for p in tmp_path.iterdir()} - {"cache"} == {"bench.json"}


def test_bench_rejects_bad_input(capsys):
    assert main(["bench", "--rounds", "0"]) == 2
    assert main(["bench", "--steps-per-round", "0"]) == 2
    if not torch.cuda.is_available():
        assert main(["bench", "--device", "cuda"]) == 2
    assert "error" in capsys.readouterr().err
