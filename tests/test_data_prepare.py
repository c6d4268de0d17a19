"""prepare_data: tokenizer and token caches, memmaps, exact byte counts, concurrency."""

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import minimind.data.prepare as prepare_module
from minimind.data import DataConfig, PreparedData, prepare_data
from minimind.data.corpus import read_corpus
from minimind.data.tokenizer import EOS, train_bpe


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


def test_shakespeare_at_vocab_2048(shakespeare):
    assert shakespeare.vocab_size == shakespeare.tokenizer.get_vocab_size() == 2048
    assert len({shakespeare.pad_id, shakespeare.bos_id, shakespeare.eos_id}) == 3
    assert shakespeare.train_tokens.dtype == np.uint16 == shakespeare.val_tokens.dtype
    assert isinstance(shakespeare.train_tokens, np.memmap)
    assert (shakespeare.train_bytes, shakespeare.val_bytes) == (1_003_854, 111_540)
    assert int(shakespeare.train_tokens.max()) < 2048
    # BPE compresses English several-fold; a byte-level fallback would give one token per byte.
    assert 2 < shakespeare.val_bytes / len(shakespeare.val_tokens) < 5


def test_token_files_decode_to_the_exact_corpus(shakespeare):
    raw = read_corpus("tinyshakespeare")
    decode = shakespeare.tokenizer.decode
    train, val = decode(shakespeare.train_tokens.tolist()), decode(shakespeare.val_tokens.tolist())
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


def fail(*args, **kwargs):
    raise AssertionError("the cache or the given tokenizer should have been used")


def test_second_call_is_a_cache_hit(tmp_path, monkeypatch):
    cfg = small_config(tmp_path)
    first = prepare_data(cfg)
    monkeypatch.setattr(prepare_module, "train_bpe", fail)
    monkeypatch.setattr(prepare_module, "write_tokens", fail)
    monkeypatch.setattr(prepare_module, "split_corpus", fail)
    second = prepare_data(cfg)
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert np.array_equal(second.train_tokens, first.train_tokens)
    assert np.array_equal(second.val_tokens, first.val_tokens)
    assert (second.val_bytes, second.train_bytes) == (first.val_bytes, first.train_bytes)


def test_cache_entries_and_meta(tmp_path):
    data = prepare_data(small_config(tmp_path))
    (tokenizer_json,) = (tmp_path / "cache" / "tokenizers").glob("*/tokenizer.json")
    assert data.tokenizer_path == tokenizer_json
    (meta_path,) = (tmp_path / "cache" / "tokens").glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["dtype"] == "uint16"
    assert meta["val_tokens"] == len(data.val_tokens) and meta["val_bytes"] == data.val_bytes
    assert (meta_path.parent / "train.bin").stat().st_size == 2 * len(data.train_tokens)
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


def test_document_corpus_tokens_are_joined_by_eos(tmp_path):
    path = tmp_path / "docs.jsonl"
    docs = [f"Document number {i}, with some words in it." for i in range(40)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    data = prepare_data(DataConfig(corpus=str(path), val_fraction=0.1, cache_dir=str(tmp_path)))
    val_docs = docs[-4:]  # 10% of 40 equal-sized documents
    assert data.val_bytes == sum(len(d) for d in val_docs)
    val = data.val_tokens.tolist()
    assert val.count(data.eos_id) == 3
    assert data.tokenizer.decode(val, skip_special_tokens=False) == EOS.join(val_docs)
    assert data.train_tokens.tolist().count(data.eos_id) == 35


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
