"""Weighted mixtures (`data.sources`) and the held-out suite (`data.eval_sets`)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from minimind.data import DataConfig, prepare_data
from minimind.data.batches import MixtureBatches, TrainBatches
from minimind.data.chunking import CHUNK_CHARS
from minimind.data.mixture import repeating_sources
from minimind.data.tokenizer import train_bpe
from minimind.spec import SpecError, expand, validate_spec
from minimind.training.device import resolve_run_device
from minimind.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

# Source k's tokens are k·10_000 + position: every window names its source and its start.
SOURCES = [
    (f"s{k}", np.arange(k * 10_000, k * 10_000 + n, dtype=np.uint32))
    for k, n in enumerate([3_000, 800, 5_000])
]
WEIGHTS = [0.5, 0.2, 0.3]


TIMINGS = ("perf/", "time/", "sys/")


class Recorder:
    def __init__(self) -> None:
        self.points: dict[str, dict[int, float]] = {}

    def log_metrics(self, metrics, step):
        for key, value in metrics.items():
            self.points.setdefault(key, {})[step] = value

    def flush(self, timeout=None):
        return True


def source_of(batch: torch.Tensor) -> np.ndarray:
    return (batch[:, 0] // 10_000).numpy()


def test_mixture_proportions_are_the_weights_within_binomial_error():
    batches = MixtureBatches(SOURCES, WEIGHTS, batch_size=64, seq_len=16, seed=3)
    drawn = np.concatenate([source_of(next(batches)) for _ in range(300)])
    counts = np.bincount(drawn, minlength=3)
    n = len(drawn)
    for k, weight in enumerate(WEIGHTS):
        # two-sided exact binomial test at 1e-4 per source: a wrong rule fails, chance does not
        assert stats.binomtest(int(counts[k]), n, weight).pvalue > 1e-4, (k, counts[k] / n)
    assert np.array_equal(batches.windows_drawn, counts)
    metrics = batches.source_metrics()
    assert metrics["data/s1/tokens"] == counts[1] * 16
    assert metrics["data/s1/epochs"] == pytest.approx(counts[1] * 16 / 800)


def test_windows_lie_inside_their_source():
    batches = MixtureBatches(SOURCES, WEIGHTS, batch_size=32, seq_len=16, seed=0)
    for _ in range(50):
        batch = next(batches)
        assert torch.equal(batch, batch[:, :1] + torch.arange(16))  # consecutive tokens
        for row in batch:
            k = int(row[0]) // 10_000
            assert int(row[-1]) < k * 10_000 + len(SOURCES[k][1])  # never past its source


def test_batches_are_a_pure_function_of_seed_and_step():
    def stream(seed: int, n: int) -> list[torch.Tensor]:
        batches = MixtureBatches(SOURCES, WEIGHTS, 8, 16, seed)
        return [next(batches) for _ in range(n)]

    a, b = stream(1, 12), stream(1, 12)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, stream(2, 12), strict=True))
    resumed = MixtureBatches(SOURCES, WEIGHTS, 8, 16, seed=1)
    resumed.load_state_dict({"seed": 1, "batches_drawn": 7})
    assert all(torch.equal(next(resumed), x) for x in a[7:])
    fresh = MixtureBatches(SOURCES, WEIGHTS, 8, 16, seed=1)
    for _ in range(12):
        next(fresh)
    assert np.array_equal(resumed.windows_drawn, fresh.windows_drawn)  # recounted on load
    # Each rank's rows are its slice of the single-process batch.
    halves = [MixtureBatches(SOURCES, WEIGHTS, 8, 16, 1, rank=r, world=2) for r in (0, 1)]
    assert torch.equal(torch.cat([next(h) for h in halves]), a[0])


def test_a_weight_changes_only_the_draws_not_their_seeding():
    # A one-source mixture's windows are TrainBatches' own (the corpus path's numbers).
    tokens = SOURCES[0][1]
    single, plain = (
        MixtureBatches([SOURCES[0]], [1.0], 8, 16, seed=4),
        TrainBatches(tokens, 8, 16, 4),
    )
    assert next(plain).shape == next(single).shape


def mixture_spec(tiny_spec, tmp_path: Path, **data):
    spec = tiny_spec()
    corpus = Path(spec["data"].pop("corpus"))
    text = corpus.read_text()
    code = tmp_path / "code"
    code.mkdir()
    for k in range(40):  # a second domain: short Python-like documents
        (code / f"m{k}.txt").write_text(f"def f{k}(x):\n    return x * {k} + {k % 7}\n" * 6)
    spec["data"].update(
        {
            "sources": {
                "prose": {"corpus": str(corpus), "weight": 0.7},
                "code": {"corpus": str(code), "weight": 0.3, "val_fraction": 0.2},
            },
            **data,
        }
    )
    spec["train"].update({"steps": 6, "eval_every": 3, "eval_batches": 2})
    return spec, text


def make_trainer(spec: dict, seed: int = 0) -> Trainer:
    valid = validate_spec(spec)
    data = prepare_data(valid.data)
    model_cfg = valid.model_config_obj()
    return Trainer(
        model_cfg, valid.train, data, seed, resolve_run_device(valid.train, model_cfg.dim)
    )


def test_a_one_source_mixture_gives_the_corpus_run_bit_for_bit(tiny_spec):
    plain = tiny_spec(train={"steps": 8, "eval_every": 4})
    mixed = copy.deepcopy(plain)
    corpus = mixed["data"].pop("corpus")
    mixed["data"]["sources"] = {"shakespeare": {"corpus": corpus, "weight": 1.0}}
    runs = []
    for spec in (plain, mixed):
        sink = Recorder()
        make_trainer(spec).fit(sink)
        runs.append({k: v for k, v in sink.points.items() if not k.startswith(TIMINGS)})
    assert runs[0] == runs[1]  # every metric at every step, val/bpb included, bit for bit
    assert "val/bpb" in runs[0]


def documents_of(data, tokens) -> set[str]:
    starts = list(tokens.doc_starts()) + [len(tokens)]
    whole = np.asarray(tokens)
    return {
        data.tokenizer.decode(whole[a:b].tolist())
        for a, b in zip(starts[:-1], starts[1:], strict=True)
    }


def test_each_source_holds_out_its_own_documents_and_one_tokenizer_reads_both(
    tiny_spec, tmp_path, monkeypatch
):
    import minimind.data.mixture as mixture

    sampled: list[str] = []

    def recording_bpe(documents, vocab_size):
        sampled.extend(documents)
        return train_bpe(sampled, vocab_size)

    monkeypatch.setattr(mixture, "train_bpe", recording_bpe)
    spec, text = mixture_spec(tiny_spec, tmp_path)
    spec["data"]["cache_dir"] = str(tmp_path / "cache")
    spec["data"]["tokenizer"]["sample_bytes"] = 10_000
    data = prepare_data(validate_spec(spec).data)
    assert [s.name for s in data.sources] == ["prose", "code"]
    assert [s.weight for s in data.sources] == pytest.approx([0.7, 0.3])
    # The tokenizer's sample: 70 % prose, 30 % code (each source's share of sample_bytes, read
    # in whole chunks: up to one chunk, here one prose text's or one code file, over).
    code_bytes = sum(len(t.encode()) for t in sampled if t.startswith("def f"))
    prose_bytes = sum(len(t.encode()) for t in sampled) - code_bytes
    assert 7_000 <= prose_bytes < 7_000 + CHUNK_CHARS and 3_000 <= code_bytes < 3_000 + 300
    code = data.sources[1]
    train_docs, val_docs = (
        documents_of(data, code.train_tokens),
        documents_of(data, code.val.tokens),
    )
    assert len(val_docs) >= 4 and not val_docs & train_docs  # its own hold-out, disjoint
    assert len(data.train_tokens) == sum(len(s.train_tokens) for s in data.sources)
    assert data.val_bytes == sum(s.val.n_bytes for s in data.sources)
    manifests = list((tmp_path / "cache").glob("tokens/mix-*/manifest.json"))
    (manifest,) = [json.loads(m.read_text()) for m in manifests]
    assert manifest["mixture"]["code"]["weight"] == pytest.approx(0.3)
    assert manifest["splits"]["train"]["tokens"] == len(data.train_tokens)


def test_the_dry_run_names_a_source_that_repeats(tiny_spec, tmp_path):
    spec, _ = mixture_spec(tiny_spec, tmp_path)
    cfg = validate_spec(spec).data
    data = prepare_data(cfg)
    code_tokens = len(data.sources[1].train_tokens)
    repeats = repeating_sources(cfg, tokens=int(code_tokens / 0.3 * 2.5))
    assert set(repeats) == {"code"} and repeats["code"] == pytest.approx(2.5, rel=1e-3)
    fresh = cfg.model_copy(update={"cache_dir": str(tmp_path / "empty")})
    assert repeating_sources(fresh, 10**9) is None  # not prepared: unknown, not guessed


def test_every_eval_set_bpb_equals_a_float64_recount(tiny_spec, tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 60)
    spec, _ = mixture_spec(
        tiny_spec,
        tmp_path,
        eval_sets={
            "code": {"source": "code"},
            "latin": {"corpus": str(other), "val_fraction": 0.5},
        },
    )
    trainer = make_trainer(spec)
    sink = Recorder()
    trainer.fit(sink)
    step = trainer.step
    trainer.model.eval()
    figures = {}
    for name, held in trainer.data.eval_sets.items():
        tokens, total = held.tokens, 0.0
        with torch.no_grad():
            for start in range(0, len(tokens) - 1, trainer.cfg.seq_len):
                x = torch.from_numpy(
                    np.asarray(tokens[start : start + trainer.cfg.seq_len + 1]).astype("int64")
                )
                y = x[1:]
                logp = torch.log_softmax(trainer.model(x[None, : len(y)]).logits[0].double(), -1)
                total -= logp[torch.arange(len(y)), y].sum().item()
        figures[name] = total / (math.log(2) * held.n_bytes)
        assert sink.points[f"val/{name}/loss"][step] == pytest.approx(
            total / (len(tokens) - 1), rel=1e-5
        )
        assert sink.points[f"val/{name}/bpb"][step] == pytest.approx(figures[name], rel=1e-5)
        assert set(sink.points[f"val/{name}/bpb_sampled"]) == {3, 6}
    assert sink.points["val/bpb_macro"][step] == pytest.approx(
        np.mean(list(figures.values())), rel=1e-5
    )
    assert trainer.data.eval_sets["code"].n_bytes == trainer.data.sources[1].val.n_bytes
    # per-source tokens seen and epochs, logged with the training metrics
    assert sink.points["data/code/tokens"][step] + sink.points["data/prose/tokens"][step] == (
        step * trainer.cfg.tokens_per_step
    )


@pytest.mark.parametrize(
    "data, field",
    [
        (
            {
                "corpus": "hf:owner/name",
                "sources": {"a": {"corpus": "tinyshakespeare", "weight": 1}},
            },
            "data.corpus",
        ),
        ({"sources": {"a": {"corpus": "tinyshakespeare", "weight": 0}}}, "data.sources.a.weight"),
        ({"sources": {}}, "data.sources"),
        ({"eval_sets": {"x": {"source": "nope"}}}, "data.eval_sets.x.source"),
        ({"eval_sets": {"bad/name": {"corpus": "tinyshakespeare"}}}, "data.eval_sets.bad/name"),
        ({"eval_sets": {"x": {}}}, "data.eval_sets.x"),
    ],
)
def test_a_bad_mixture_or_suite_is_one_line_naming_its_field(data, field):
    with pytest.raises(SpecError) as error:
        validate_spec({"name": "x", "data": data})
    assert str(error.value).startswith(field) and "\n" not in str(error.value)


def test_a_mixture_weight_is_an_ablation_axis():
    spec = validate_spec(
        {
            "name": "x",
            "data": {
                "sources": {
                    "prose": {"corpus": "tinyshakespeare", "weight": 0.5},
                    "more": {"corpus": "tinyshakespeare", "weight": 0.5},
                }
            },
            "ablate": {
                "mix": [
                    {"data.sources.prose.weight": 0.7, "data.sources.more.weight": 0.3},
                    {"data.sources.prose.weight": 0.3, "data.sources.more.weight": 0.7},
                ]
            },
        }
    )
    weights = [v.spec.data.weights()["prose"] for v in expand(spec)]
    assert weights == pytest.approx([0.7, 0.3])
    assert DataConfig().weights() == {"corpus": 1.0}


def test_a_suite_metric_is_a_sweep_objective():
    sweep = {"params": {"train.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-2}}}
    for metric in ("val/bpb_macro", "val/code/bpb", "val/code/loss"):
        spec = validate_spec({"name": "x", "sweep": {**sweep, "objective": metric}})
        assert spec.sweep_section().metrics[0] == metric
    with pytest.raises(SpecError, match="unknown metric 'val/code/accuracy'"):
        validate_spec({"name": "x", "sweep": {**sweep, "objective": "val/code/accuracy"}})


def test_data_prepare_lists_each_source_and_the_dry_run_names_a_repeating_one(
    tiny_spec, tmp_path, capsys
):
    import yaml

    from minimind.cli import main

    spec, _ = mixture_spec(tiny_spec, tmp_path, eval_sets={"code": {"source": "code"}})
    spec["train"]["steps"] = 400  # 400 · 4 · 32 tokens: the code source's 30 % repeats
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "source epochs known once prepared" in capsys.readouterr().out
    assert main(["data", "prepare", str(path)]) == 0
    out = capsys.readouterr().out
    assert "source prose" in out and "source code" in out and "eval set code" in out
    assert main(["run", str(path), "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "repeats" in line]
    assert len(lines) == 1 and "data.sources.code repeats" in lines[0]
