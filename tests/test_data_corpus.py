"""DataConfig validation, corpus formats and the validation hold-out."""

import gzip
import hashlib
import json
from importlib import resources

import pandas as pd
import pytest
from pydantic import ValidationError

from minimind.data import DataConfig, DataError
from minimind.data.corpus import read_corpus, split_corpus

SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def error_locs(**kwargs) -> list[tuple]:
    with pytest.raises(ValidationError) as info:
        DataConfig(**kwargs)
    return [error["loc"] for error in info.value.errors()]


def test_defaults_are_the_embedded_corpus():
    cfg = DataConfig()
    assert (cfg.corpus, cfg.val_fraction, cfg.cache_dir) == (
        "tinyshakespeare",
        0.1,
        "results/cache",
    )
    assert (cfg.tokenizer.type, cfg.tokenizer.vocab_size, cfg.tokenizer.path) == ("bpe", 2048, None)


def test_missing_corpus_is_an_error_on_corpus(tmp_path):
    with pytest.raises(ValidationError, match="corpus file not found"):
        DataConfig(corpus=str(tmp_path / "absent.txt"))
    assert error_locs(corpus=str(tmp_path / "absent.jsonl")) == [("corpus",)]


def test_unsupported_suffix_is_an_error_on_corpus(tmp_path):
    (tmp_path / "table.csv").write_text("text\nhello\n")
    with pytest.raises(ValidationError, match="unsupported corpus"):
        DataConfig(corpus=str(tmp_path / "table.csv"))
    assert error_locs(corpus="shakespeare") == [("corpus",)]


def test_relative_corpus_path_is_relative_to_cwd(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("hello")
    monkeypatch.chdir(tmp_path)
    assert DataConfig(corpus="c.txt").corpus == "c.txt"


@pytest.mark.parametrize(
    ("kwargs", "loc"),
    [
        ({"val_fraction": 0.0}, ("val_fraction",)),
        ({"val_fraction": 0.6}, ("val_fraction",)),
        ({"tokenizer": {"vocab_size": 100}}, ("tokenizer", "vocab_size")),
        ({"tokenizer": {"vocab_size": 1 << 20}}, ("tokenizer", "vocab_size")),
        ({"tokenizer": {"type": "wordpiece"}}, ("tokenizer", "type")),
        ({"tokenizer": {"path": "/nonexistent/tokenizer.json"}}, ("tokenizer", "path")),
        ({"tokenizer": {"vocab": 10}}, ("tokenizer", "vocab")),
        ({"shuffle": True}, ("shuffle",)),
        ({"cache_dir": ""}, ("cache_dir",)),
    ],
)
def test_invalid_settings_name_their_field(kwargs, loc):
    assert error_locs(**kwargs) == [loc]


def test_embedded_corpus_is_tinyshakespeare():
    raw = read_corpus("tinyshakespeare")
    packed = resources.files("minimind.data").joinpath("corpora", "tinyshakespeare.txt.gz")
    assert raw == gzip.decompress(packed.read_bytes())
    assert len(raw) == 1_115_394 and hashlib.sha256(raw).hexdigest() == SHAKESPEARE_SHA256


def test_embedded_split_matches_nanogpt():
    raw = read_corpus("tinyshakespeare")
    split = split_corpus("tinyshakespeare", raw, 0.1)
    n = len(raw)  # nanoGPT: train = data[:int(n * 0.9)], val = data[int(n * 0.9):]
    assert split.train == [raw[: int(n * 0.9)].decode()]
    assert split.val == [raw[int(n * 0.9) :].decode()]
    assert (split.train_bytes, split.val_bytes) == (1_003_854, 111_540)


def test_text_split_holds_out_the_last_bytes_exactly(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(bytes(range(32, 127)) * 10 + b"\r\n" * 30)  # 1010 bytes; \r\n kept as is
    split = split_corpus(str(path), read_corpus(str(path)), 0.2)
    assert (split.train_bytes, split.val_bytes) == (808, 202)
    assert (split.train[0] + split.val[0]).encode() == path.read_bytes()
    assert split.val[0].endswith("\r\n")


def test_text_split_moves_to_a_character_boundary(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("é" * 10, encoding="utf-8")  # 20 bytes; int(20 * 0.75) = 15 is mid-character
    split = split_corpus(str(path), read_corpus(str(path)), 0.25)
    assert split.train == ["é" * 8] and split.val == ["éé"]
    assert (split.train_bytes, split.val_bytes) == (16, 4)


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")


def test_jsonl_holds_out_the_last_documents_by_bytes(tmp_path):
    texts = [f"document {i:02d}" for i in range(10)]  # 11 bytes each
    path = tmp_path / "c.jsonl"
    write_jsonl(path, texts)
    split = split_corpus(str(path), read_corpus(str(path)), 0.25)
    assert split.train == texts[:7] and split.val == texts[7:]  # 33 >= 0.25 * 110 > 22
    assert (split.train_bytes, split.val_bytes) == (77, 33)


def test_jsonl_keeps_unicode_line_separators_inside_documents(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(
        b'{"text": "a\xe2\x80\xa8b"}\n\n{"text": "second", "id": 3}\n{"text": "third"}'
    )
    split = split_corpus(str(path), read_corpus(str(path)), 0.3)
    assert split.train + split.val == ["a\u2028b", "second", "third"]


def test_parquet_reads_the_text_column(tmp_path):
    path = tmp_path / "c.parquet"
    texts = ["one document", "two documents", None, "the last one, held out"]
    pd.DataFrame({"id": range(4), "text": texts}).to_parquet(path)
    split = split_corpus(str(path), read_corpus(str(path)), 0.4)
    assert split.train == ["one document", "two documents"]
    assert split.val == ["the last one, held out"]
    assert split.val_bytes == len("the last one, held out")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.jsonl", '{"text": "ok"}\nnot json\n', "line 2: invalid JSON"),
        ("bad.jsonl", '{"text": "ok"}\n{"body": "x"}\n', r'line 2: expected \{"text"'),
        ("bad.jsonl", '{"text": "ok"}\n{"text": 5}\n', "line 2"),
        ("one.jsonl", '{"text": "only one"}\n', "at least 2 documents"),
        ("tiny.txt", "x", "too small"),
        ("empty.txt", "", "too small"),
    ],
)
def test_malformed_corpora_raise_data_errors_naming_them(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=match) as info:
        split_corpus(str(path), read_corpus(str(path)), 0.1)
    assert name in str(info.value)


def test_parquet_without_text_column_is_a_data_error(tmp_path):
    path = tmp_path / "c.parquet"
    pd.DataFrame({"body": ["a", "b"]}).to_parquet(path)
    with pytest.raises(DataError, match="'text' column"):
        split_corpus(str(path), read_corpus(str(path)), 0.1)


def test_invalid_utf8_text_is_a_data_error(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"abc\xff" * 10)
    with pytest.raises(DataError, match="UTF-8"):
        split_corpus(str(path), read_corpus(str(path)), 0.1)
