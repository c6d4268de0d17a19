"""prepare_data: the tokenizer and token-shard caches, exact byte counts, parallel and resumable
tokenization, bounded memory, concurrency."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

import minimind.data.prepare as prepare_module
import minimind.data.sources as sources_module
from minimind.data import DataConfig, DataError, PreparedData, prepare_data
from minimind.data.sources import read_text_corpus
from minimind.data.tokenizer import EOS, train_bpe
from minimind.data.tokens import TokenStream


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory) -> PreparedData:
    """The default corpus at the default vocab of 2048 (about a second to prepare)."""
    return prepare_data(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def small_corpus(tmp_path, n_lines: int = 400):
    path = tmp_path / "small.txt"
    path.write_text("".join(f"Line {i}: the quick brown fox, jumps!\n" for i in range(n_lines)))
    return path


def small_config(tmp_path, **overrides) -> DataConfig:
    fields = {
        "corpus": str(small_corpus(tmp_path)),
        "tokenizer": {"vocab_size": 300},
        "cache_dir": str(tmp_path / "cache"),
    }
    return DataConfig(**{**fields, **overrides})


def stories(n: int, seed: int = 0) -> list[str]:
    """`n` varied documents, some with non-ASCII text and blank lines."""
    rng = np.random.default_rng(seed)
    words = ["the", "fox", "sat", "on", "a", "mat", "and", "naïve", "café", "ran", "über", "日本"]
    return [
        " ".join(rng.choice(words, size=int(rng.integers(3, 60))))
        + ("\n\nThe end." if i % 5 == 0 else "")
        for i in range(n)
    ]


def parquet_shards(directory, texts, n_files: int):
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(n_files):
        pd.DataFrame({"text": texts[k::n_files]}).to_parquet(directory / f"part-{k:03d}.parquet")
    return directory


def decoded_documents(data: PreparedData, tokens) -> list[str]:
    text = data.tokenizer.decode(np.asarray(tokens).tolist(), skip_special_tokens=False)
    assert text.endswith(EOS)
    return text[: -len(EOS)].split(EOS)


def test_shakespeare_at_vocab_2048(shakespeare):
    assert shakespeare.vocab_size == shakespeare.tokenizer.get_vocab_size() == 2048
    assert len({shakespeare.pad_id, shakespeare.bos_id, shakespeare.eos_id}) == 3
    assert shakespeare.train_tokens.dtype == np.uint16 == shakespeare.val_tokens.dtype
    assert isinstance(shakespeare.train_tokens.shards[0], np.memmap)
    assert (shakespeare.train_bytes, shakespeare.val_bytes) == (1_003_854, 111_540)
    assert int(np.asarray(shakespeare.train_tokens).max()) < 2048
    # BPE compresses English several-fold; a byte-level fallback would give one token per byte.
    assert 2 < shakespeare.val_bytes / len(shakespeare.val_tokens) < 5


def test_token_files_decode_to_the_exact_corpus(shakespeare):
    raw = read_text_corpus("tinyshakespeare")
    (train,) = decoded_documents(shakespeare, shakespeare.train_tokens)
    (val,) = decoded_documents(shakespeare, shakespeare.val_tokens)
    assert (train + val).encode() == raw
    assert len(val.encode()) == shakespeare.val_bytes


def test_tokenizer_is_trained_on_the_training_split_only(tmp_path):
    # A word that occurs only in the held-out text must not become a token.
    path = tmp_path / "c.txt"
    path.write_text("the cat sat on the mat. " * 200 + "zyzzyva " * 60)
    total = len(path.read_bytes())
    data = prepare_data(DataConfig(corpus=str(path), cache_dir=str(tmp_path / "cache")))
    assert data.val_bytes == total - int(total * 0.9) > len("zyzzyva ") * 60
    assert "Ġzyzzyva" not in data.tokenizer.get_vocab()  # byte-level BPE spells a space Ġ
    assert "Ġzyzzyva" in train_bpe([path.read_text()], 2048).get_vocab()


def test_tokenizer_reads_a_bounded_sample_of_training_documents(tmp_path, monkeypatch):
    texts = stories(200)
    directory = parquet_shards(tmp_path / "c", texts, 2)
    cfg = DataConfig(
        corpus=str(directory),
        cache_dir=str(tmp_path / "cache"),
        tokenizer={"vocab_size": 300, "sample_bytes": 2000},
    )
    seen = []
    real = prepare_module.train_bpe
    monkeypatch.setattr(
        prepare_module, "train_bpe", lambda docs, vocab: real(seen.extend(docs) or seen, vocab)
    )
    data = prepare_data(cfg)
    val = set(decoded_documents(data, data.val_tokens))
    assert 2000 <= sum(len(s.encode()) for s in seen) < 2000 + max(len(t.encode()) for t in texts)
    assert not val & set(seen)


def fail(*args, **kwargs):
    raise AssertionError("the cache or the given tokenizer should have been used")


def test_second_call_is_a_cache_hit(tmp_path, monkeypatch):
    cfg = small_config(tmp_path)
    first = prepare_data(cfg)
    monkeypatch.setattr(prepare_module, "train_bpe", fail)
    monkeypatch.setattr(prepare_module, "tokenize_piece", fail)
    second = prepare_data(cfg)
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert np.array_equal(second.train_tokens, first.train_tokens)
    assert np.array_equal(second.val_tokens, first.val_tokens)
    assert (second.val_bytes, second.train_bytes) == (first.val_bytes, first.train_bytes)
    assert second.manifest_hash == first.manifest_hash


def test_cache_entries_and_manifest(tmp_path):
    data = prepare_data(small_config(tmp_path))
    (tokenizer_json,) = (tmp_path / "cache" / "tokenizers").glob("*/tokenizer.json")
    assert data.tokenizer_path == tokenizer_json
    (manifest_path,) = (tmp_path / "cache" / "tokens").glob("*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["dtype"] == "uint16"
    val = manifest["splits"]["val"]
    assert val["tokens"] == len(data.val_tokens) and val["bytes"] == data.val_bytes
    sizes = sum((manifest_path.parent / s["file"]).stat().st_size for s in val["shards"])
    assert sizes == 2 * len(data.val_tokens)
    assert not list((tmp_path / "cache").rglob("*.tmp"))


@pytest.mark.parametrize(
    "change", [{"val_fraction": 0.2}, {"tokenizer": {"vocab_size": 320}}], ids=["split", "vocab"]
)
def test_settings_that_change_the_data_get_their_own_entries(tmp_path, change):
    base = prepare_data(small_config(tmp_path))
    other = prepare_data(small_config(tmp_path, **change))
    assert other.tokenizer_path != base.tokenizer_path
    assert len(list((tmp_path / "cache" / "tokens").iterdir())) == 2


def test_changed_corpus_content_misses_the_cache(tmp_path):
    cfg = small_config(tmp_path)
    before = prepare_data(cfg)
    small_corpus(tmp_path, n_lines=500)
    after = prepare_data(cfg)
    assert after.tokenizer_path != before.tokenizer_path
    assert after.train_bytes > before.train_bytes


def test_sharded_corpus_decodes_to_its_documents_with_exact_bytes(tmp_path, monkeypatch):
    texts = stories(400)
    directory = parquet_shards(tmp_path / "c", texts, 4)
    monkeypatch.setattr(sources_module, "PIECE_BYTES", 2000)  # many pieces from a small corpus
    cfg = DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "cache"), num_proc=1)
    data = prepare_data(cfg)
    assert len(data.train_tokens.shards) > 4
    train, val = (
        decoded_documents(data, data.train_tokens),
        decoded_documents(data, data.val_tokens),
    )
    assert sorted(train + val) == sorted(texts) and not set(train) & set(val)
    assert data.val_bytes == sum(len(t.encode()) for t in val)
    assert data.train_bytes == sum(len(t.encode()) for t in train)
    starts = data.train_tokens.doc_starts()
    assert len(starts) == len(train) and starts[0] == 0
    stream = np.asarray(data.train_tokens)
    assert np.array_equal(np.flatnonzero(stream == data.eos_id)[:-1] + 1, starts[1:])


def test_interrupted_preparation_resumes_to_identical_shards(tmp_path, monkeypatch):
    texts = stories(300)
    directory = parquet_shards(tmp_path / "c", texts, 3)
    monkeypatch.setattr(sources_module, "PIECE_BYTES", 2000)
    whole = prepare_data(DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "a")))
    cfg = DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "b"), num_proc=1)
    real, calls = prepare_module.tokenize_piece, []

    def interrupted(job):
        calls.append(job.index)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(prepare_module, "tokenize_piece", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(cfg)
    assert not list((tmp_path / "b").rglob("manifest.json"))
    resumed_calls = []
    monkeypatch.setattr(
        prepare_module, "tokenize_piece", lambda j: resumed_calls.append(j) or real(j)
    )
    resumed = prepare_data(cfg)
    assert len(resumed_calls) == len(whole.train_tokens.paths) - 2  # two pieces were done
    for a, b in zip(
        whole.train_tokens.paths + whole.val_tokens.paths,
        resumed.train_tokens.paths + resumed.val_tokens.paths,
        strict=True,
    ):
        assert a.read_bytes() == b.read_bytes()
    assert resumed.manifest_hash == whole.manifest_hash


def test_worker_processes_give_the_same_shards(tmp_path, monkeypatch):
    texts = stories(200)
    directory = parquet_shards(tmp_path / "c", texts, 2)
    monkeypatch.setattr(sources_module, "PIECE_BYTES", 4000)
    monkeypatch.setattr(sources_module.Corpus, "small", False)
    one = prepare_data(DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "a"), num_proc=1))
    two = prepare_data(DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "b"), num_proc=2))
    assert np.array_equal(one.train_tokens, two.train_tokens)
    assert one.manifest_hash == two.manifest_hash


MEMORY_PROBE = """
import json, sys
from pathlib import Path
import datasets, pyarrow.json  # their imports are not the data's memory
from minimind.data import DataConfig, prepare_data

def peak_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

directory, cache = Path(sys.argv[1]), sys.argv[2]
before = peak_kib()
data = prepare_data(DataConfig(corpus=str(directory), cache_dir=cache, streaming=True, num_proc=1,
                               tokenizer={"vocab_size": 300, "sample_bytes": 100_000}))
print(json.dumps({"growth_kib": peak_kib() - before, "bytes": data.train_bytes + data.val_bytes}))
"""


def memory_growth_kib(directory, cache) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(directory), str(cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_memory_stays_bounded_on_a_corpus_several_times_the_cap(tmp_path):
    # Files of ~6 MB, streamed: preparing 8 of them (46 MB, over 3x the cap) may take at most the cap
    # more memory than preparing 2 (the fixed cost: libraries' buffers, the tokenizer's).
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    for k in range(8):
        docs = [" ".join(rng.choice(words, 200)) for _ in range(5000)]
        for name in ["big"] + (["small"] if k < 2 else []):
            (tmp_path / name).mkdir(exist_ok=True)
            with open(tmp_path / name / f"part{k}.jsonl", "w") as f:
                f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    cap_kib = 12 * 1024
    small = memory_growth_kib(tmp_path / "small", tmp_path / "cache")
    big = memory_growth_kib(tmp_path / "big", tmp_path / "cache")
    assert big["bytes"] > 3 * cap_kib * 1024 > 1.5 * small["bytes"]
    assert big["growth_kib"] < small["growth_kib"] + cap_kib, (small, big)


def test_existing_tokenizer_path_is_loaded_not_trained(tmp_path, monkeypatch):
    cfg = small_config(tmp_path)
    trained = prepare_data(cfg)
    monkeypatch.setattr(prepare_module, "train_bpe", fail)
    loaded = prepare_data(small_config(tmp_path, tokenizer={"path": str(trained.tokenizer_path)}))
    assert loaded.tokenizer_path == trained.tokenizer_path
    assert np.array_equal(loaded.val_tokens, trained.val_tokens)


def test_large_vocab_tokens_are_uint32(tmp_path):
    base = prepare_data(small_config(tmp_path))
    big = base.tokenizer
    big.add_tokens([f"<extra{i}>" for i in range(65_536)])
    path = tmp_path / "big" / "tokenizer.json"
    path.parent.mkdir()
    big.save(str(path))
    data = prepare_data(small_config(tmp_path, tokenizer={"path": str(path)}))
    assert data.vocab_size > 1 << 16
    assert data.val_tokens.dtype == np.uint32
    assert np.array_equal(data.val_tokens, base.val_tokens)


def test_concurrent_preparation_agrees(tmp_path):
    cfg = small_config(tmp_path)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: prepare_data(cfg), range(4)))
    for data in results[1:]:
        assert np.array_equal(data.train_tokens, results[0].train_tokens)
        assert data.tokenizer.to_str() == results[0].tokenizer.to_str()
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_token_stream_gathers_across_shards(tmp_path):
    arrays = [np.arange(0, 5), np.arange(5, 12), np.arange(12, 13)]
    paths = []
    for k, a in enumerate(arrays):
        paths.append(tmp_path / f"{k}.train.bin")
        a.astype(np.uint16).tofile(paths[-1])
    (tmp_path / "empty.train.bin").write_bytes(b"")
    stream = TokenStream([paths[0], tmp_path / "empty.train.bin", *paths[1:]], np.dtype(np.uint16))
    whole = np.arange(13)
    assert len(stream) == 13 and np.array_equal(stream, whole)
    assert np.array_equal(stream[3:9], whole[3:9]) and stream[12] == 12 and stream[-1] == 12
    windows = np.array([[0], [4], [8]]) + np.arange(5)
    assert np.array_equal(stream[windows], whole[windows])
    with pytest.raises(IndexError):
        stream[np.array([13])]


_ORPHANED_POOL = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from minimind.data.tokens import worker_init
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(1, mp_context=context, initializer=worker_init)
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 120)  # a worker busy with a long piece
    time.sleep(120)
"""


def test_tokenization_workers_die_with_their_killed_parent(tmp_path):
    """A `kill -9` of `data prepare` (or of `run` while it tokenizes) leaves no worker writing
    shards on its own."""
    script = tmp_path / "pool.py"
    script.write_text(_ORPHANED_POOL)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the tokenization worker outlived its SIGKILLed parent by 10 s")


@pytest.mark.parametrize(
    ("num_proc", "pieces", "cores", "expected"),
    [
        (None, 8, 1, 1),  # one process, the tokenizer's own threads
        (None, 8, 2, 1),
        (None, 16, 16, 16),  # a process per core, one tokenizer thread each
        (None, 3, 16, 3),  # never more processes than pieces (each then gets 5 threads)
        (4, 8, 2, 4),  # the user's num_proc wins
        (4, 2, 2, 2),
    ],
)
def test_processes_or_threads_by_core_count(num_proc, pieces, cores, expected):
    assert prepare_module.tokenizing_processes(num_proc, pieces, cores) == expected


def jsonl(records: list) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def corrupt_gzip() -> bytes:
    import gzip

    packed = bytearray(gzip.compress(jsonl([{"text": "x y z"}] * 2000).encode()))
    packed[40:60] = bytes(20)  # the deflate stream damaged: the CRC at its end disagrees
    return bytes(packed)


# Each a corpus refused once `datasets` has begun converting it, or once it is tokenized.
REFUSED = {
    "malformed.jsonl": ('{"text": "a fine document"}\n{"text": broken\n', {}, "data.corpus"),
    "nofield.jsonl": (jsonl([{"body": f"doc {i}"} for i in range(50)]), {}, "data.text_field"),
    "numbers.jsonl": (jsonl([{"text": i} for i in range(50)]), {}, "data.corpus"),
    "corrupt.jsonl.gz": (corrupt_gzip(), {}, "data.corpus"),
    "fake.parquet": (b"not a parquet file" * 10, {}, "data.corpus"),
    "short.jsonl": (jsonl([{"text": f"d{i}"} for i in range(40)]), {"min": 512}, "train.seq_len"),
    "few.jsonl": (
        jsonl([{"text": f"doc {i} " * 30} for i in range(20)]),
        {"val_docs": 25},
        "data.val_docs",
    ),  # fmt: skip
}


def cache_files(cache) -> list[str]:
    """What a preparation left in the cache, its lock files aside."""
    found = cache.rglob("*") if cache.exists() else []
    return sorted(str(p.relative_to(cache)) for p in found if "locks" not in p.parts)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_corpus_leaves_nothing_in_the_cache(tmp_path, name):
    content, options, field = REFUSED[name]
    corpus = tmp_path / name
    (corpus.write_bytes if isinstance(content, bytes) else corpus.write_text)(content)
    min_tokens = options.get("min", 0)
    settings = {key: value for key, value in options.items() if key != "min"}
    cfg = small_config(tmp_path, corpus=str(corpus), **settings)
    with pytest.raises(DataError) as info:
        prepare_data(cfg, min_tokens=min_tokens)
    assert str(info.value).startswith(f"{field}: ") and "\n" not in str(info.value)
    assert cache_files(tmp_path / "cache") == []


def test_a_refusal_keeps_the_entries_earlier_preparations_made(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(jsonl([{"text": f"document {i} " * 20} for i in range(60)]))
    cfg = small_config(tmp_path, corpus=str(corpus))
    data = prepare_data(cfg)
    kept = cache_files(tmp_path / "cache")
    too_long = len(data.val_tokens) + 1
    with pytest.raises(DataError, match=f"got {too_long}"):
        prepare_data(cfg, min_tokens=too_long)
    assert cache_files(tmp_path / "cache") == kept
