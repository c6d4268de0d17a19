"""DataConfig validation, corpus sources through `datasets`, and the validation hold-out."""

import bz2
import gzip
import hashlib
import json
import os
from importlib import resources

import pandas as pd
import pytest
from pydantic import ValidationError

from minimind.data import DataConfig, DataError
from minimind.data.sources import documents, open_corpus, read_text_corpus, split_text

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


def test_a_fifo_corpus_is_not_a_regular_file_rather_than_not_found(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValidationError, match=f"corpus {fifo} is not a regular file"):
        DataConfig(corpus=str(fifo))


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
        ({"val_docs": 0}, ("val_docs",)),
        ({"num_proc": 0}, ("num_proc",)),
        ({"tokenizer": {"sample_bytes": 0}}, ("tokenizer", "sample_bytes")),
        ({"cache_dir": ""}, ("cache_dir",)),
    ],
)
def test_invalid_settings_name_their_field(kwargs, loc):
    assert error_locs(**kwargs) == [loc]


def test_embedded_corpus_is_tinyshakespeare():
    raw = read_text_corpus("tinyshakespeare")
    packed = resources.files("minimind.data").joinpath("corpora", "tinyshakespeare.txt.gz")
    assert raw == gzip.decompress(packed.read_bytes())
    assert len(raw) == 1_115_394 and hashlib.sha256(raw).hexdigest() == SHAKESPEARE_SHA256


def test_embedded_split_matches_nanogpt():
    raw = read_text_corpus("tinyshakespeare")
    n = len(raw)  # nanoGPT: train = data[:int(n * 0.9)], val = data[int(n * 0.9):]
    assert split_text("tinyshakespeare", raw, 0.1) == (
        raw[: int(n * 0.9)].decode(),
        raw[int(n * 0.9) :].decode(),
    )
    assert splits(DataConfig()) == ([raw[: int(n * 0.9)].decode()], [raw[int(n * 0.9) :].decode()])


def test_text_split_holds_out_the_last_bytes_exactly(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(bytes(range(32, 127)) * 10 + b"\r\n" * 30)  # 1010 bytes; \r\n kept as is
    train, val = split_text(str(path), read_text_corpus(str(path)), 0.2)
    assert (len(train.encode()), len(val.encode())) == (808, 202)
    assert (train + val).encode() == path.read_bytes() and val.endswith("\r\n")


def test_text_split_moves_to_a_character_boundary(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("é" * 10, encoding="utf-8")  # 20 bytes; int(20 * 0.75) = 15 is mid-character
    assert split_text(str(path), read_text_corpus(str(path)), 0.25) == ("é" * 8, "éé")


def test_compressed_text_file_reads_as_its_text(tmp_path):
    (tmp_path / "c.txt.bz2").write_bytes(bz2.compress(b"hello world\n" * 20))
    train, val = splits(DataConfig(corpus=str(tmp_path / "c.txt.bz2"), cache_dir=str(tmp_path)))
    assert "".join(train + val) == "hello world\n" * 20


def splits(cfg: DataConfig) -> tuple[list[str], list[str]]:
    """(training, validation) documents of a corpus, in corpus order."""
    corpus = open_corpus(cfg)
    train, val = [], []
    for piece in corpus.pieces:
        for texts, held in documents(corpus, piece):
            for text, is_val in zip(texts, held, strict=True):
                (val if is_val else train).append(text)
    return train, val


def write_jsonl(path, texts, opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": t}) + "\n" for t in texts))


TEXTS = [f"document {i:03d} says {'word ' * (i % 7)}" for i in range(300)]


def write_corpus(directory, fmt: str, texts=TEXTS, n_files: int = 3):
    """`texts` in `n_files` files of format `fmt` under `directory`; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(n_files):
        part = texts[k::n_files]
        if fmt == "jsonl":
            write_jsonl(directory / f"part{k}.jsonl", part)
        elif fmt == "jsonl.gz":
            write_jsonl(directory / f"part{k}.jsonl.gz", part, gzip.open)
        elif fmt == "parquet":
            pd.DataFrame({"id": range(len(part)), "text": part}).to_parquet(
                directory / f"p{k}.parquet"
            )
        else:
            for i, text in enumerate(part):
                (directory / f"doc{k}_{i:03d}.txt").write_text(text)
    return directory


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet", "txt"])
def test_directory_sources_hold_out_a_seeded_leak_free_share(tmp_path, fmt):
    directory = write_corpus(tmp_path / "corpus", fmt)
    cfg = DataConfig(corpus=str(directory), val_fraction=0.2, cache_dir=str(tmp_path / "cache"))
    train, val = splits(cfg)
    assert sorted(train + val) == sorted(TEXTS)  # every document once: no leak, none lost
    assert not set(train) & set(val)
    assert 30 < len(val) < 90  # about 20% of 300
    assert splits(cfg) == (train, val)  # deterministic
    other_train, other_val = splits(cfg.model_copy(update={"val_seed": 1}))
    assert set(other_val) != set(val)


def test_glob_and_single_file_sources(tmp_path):
    directory = write_corpus(tmp_path / "corpus", "jsonl")
    cache = str(tmp_path / "cache")
    train, val = splits(DataConfig(corpus=str(directory / "part*.jsonl"), cache_dir=cache))
    assert sorted(train + val) == sorted(TEXTS)
    train, val = splits(DataConfig(corpus=str(directory / "part0.jsonl"), cache_dir=cache))
    assert sorted(train + val) == sorted(TEXTS[0::3])


def test_val_docs_holds_out_exactly_that_many(tmp_path):
    directory = write_corpus(tmp_path / "corpus", "parquet")
    cfg = DataConfig(corpus=str(directory), val_docs=25, cache_dir=str(tmp_path / "cache"))
    train, val = splits(cfg)
    assert len(val) == 25 and len(train) == 275 and not set(train) & set(val)


def test_a_corpus_with_its_own_validation_split_uses_it(tmp_path):
    directory = tmp_path / "corpus"
    directory.mkdir()
    pd.DataFrame({"text": TEXTS[:200]}).to_parquet(directory / "train-00000.parquet")
    pd.DataFrame({"text": TEXTS[200:]}).to_parquet(directory / "validation-00000.parquet")
    train, val = splits(DataConfig(corpus=str(directory), cache_dir=str(tmp_path / "cache")))
    assert (train, val) == (TEXTS[:200], TEXTS[200:])


@pytest.mark.parametrize("streaming", [False, True])
def test_hub_sources_load_through_datasets(tmp_path, streaming):
    # `hf:<name>` goes through datasets.load_dataset(<name>), which also takes a local folder:
    # the same code path as a hub download, without the network.
    directory = tmp_path / "hub"
    directory.mkdir()
    pd.DataFrame({"story": TEXTS[:200]}).to_parquet(directory / "train-00000.parquet")
    pd.DataFrame({"story": TEXTS[200:]}).to_parquet(directory / "validation-00000.parquet")
    cfg = DataConfig(
        corpus=f"hf:{directory}", text_field="story", streaming=streaming, cache_dir=str(tmp_path)
    )
    assert splits(cfg) == (TEXTS[:200], TEXTS[200:])


def test_streaming_holds_out_without_knowing_the_size(tmp_path):
    directory = write_corpus(tmp_path / "corpus", "jsonl")
    cfg = DataConfig(
        corpus=str(directory), streaming=True, val_fraction=0.2, cache_dir=str(tmp_path)
    )
    train, val = splits(cfg)
    assert sorted(train + val) == sorted(TEXTS) and 30 < len(val) < 90
    assert splits(cfg) == (train, val)


HUB_CARD = """---
dataset_info:
  features:
  - name: text
    dtype: string
  splits:
  - name: train
    num_examples: 300
---
"""


def test_a_val_docs_past_a_hub_datasets_declared_size_fails_before_downloading(
    tmp_path, monkeypatch
):
    # A hub dataset's card declares its document count; `hf:<folder>` reads a local card.
    directory = tmp_path / "hub"
    directory.mkdir()
    pd.DataFrame({"text": TEXTS}).to_parquet(directory / "train-00000.parquet")
    (directory / "README.md").write_text(HUB_CARD)
    cfg = DataConfig(corpus=f"hf:{directory}", val_docs=25, cache_dir=str(tmp_path))
    assert [len(split) for split in splits(cfg)] == [275, 25]  # the card lets a fitting one by

    import datasets

    def download(*args, **kwargs):
        raise AssertionError("downloaded the corpus before checking val_docs")

    monkeypatch.setattr(datasets, "load_dataset", download)
    with pytest.raises(DataError) as err:
        open_corpus(cfg.model_copy(update={"val_docs": 300}))
    assert str(err.value) == "data.val_docs: must be < the corpus's 300 documents, got 300"


def bad_input(tmp_path, corpus: str, **fields) -> str:
    """The one-line error of a bad corpus: from the spec's validation or from opening it."""
    try:
        cfg = DataConfig(corpus=corpus, cache_dir=str(tmp_path / "cache"), **fields)
        splits(cfg)
    except ValidationError as e:
        (error,) = e.errors()
        return f"data.{'.'.join(map(str, error['loc']))}: {error['msg']}"
    except DataError as e:
        return str(e)
    raise AssertionError(f"{corpus} was accepted")


def test_bad_sources_are_one_line_errors_naming_the_field(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.txt").write_bytes(b"fine text")
    (tmp_path / "bad" / "b.txt").write_bytes(b"abc\xff\xfe")
    write_jsonl(tmp_path / "nofield.jsonl", ["ok"])
    with open(tmp_path / "nofield.jsonl", "a") as f:
        f.write('{"body": "no text here"}\n')
    pd.DataFrame({"body": ["a", "b"]}).to_parquet(tmp_path / "c.parquet")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.txt").write_text("a")
    write_jsonl(tmp_path / "mixed" / "b.jsonl", ["b"])
    cases = {
        str(tmp_path / "absent.jsonl"): "data.corpus: Value error, corpus file not found",
        str(tmp_path / "absent"): "data.corpus: Value error, unsupported corpus",
        str(tmp_path / "empty"): "data.corpus: Value error, directory",
        str(tmp_path / "*.nothing"): "data.corpus: Value error, glob",
        str(tmp_path / "mixed"): "data.corpus: Value error, corpus",
        str(tmp_path / "bad"): "data.corpus: cannot load",
        str(tmp_path / "nofield.jsonl"): "data.corpus:",
        str(tmp_path / "c.parquet"): "data.text_field: ",
    }
    for corpus, start in cases.items():
        message = bad_input(tmp_path, corpus)
        assert message.startswith(start), (corpus, message)
        assert "\n" not in message
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    message = bad_input(tmp_path, "hf:nobody/no-such-dataset")
    assert message.startswith("data.corpus: cannot load hf:nobody/no-such-dataset"), message


def test_bad_utf8_in_a_stream_is_a_data_error(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "b.txt").write_bytes(b"abc\xff\xfe")
    (tmp_path / "bad" / "c.txt").write_bytes(b"fine")
    message = bad_input(tmp_path, str(tmp_path / "bad"), streaming=True)
    assert message.startswith("data.corpus: cannot read") and "UnicodeDecodeError" in message


@pytest.mark.parametrize(
    ("content", "match"), [("x", "too small"), ("", "too small"), ("abc\udcff" * 10, "UTF-8")]
)
def test_malformed_text_files_are_data_errors(tmp_path, content, match):
    path = tmp_path / "c.txt"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(DataError, match=match) as info:
        splits(DataConfig(corpus=str(path), cache_dir=str(tmp_path)))
    assert str(info.value).startswith("data.corpus: ")


def test_an_hf_corpus_fails_at_once_when_the_hub_does_not_answer(tmp_path, monkeypatch, capfd):
    """Offline: one line saying so, without datasets' minute of retried requests."""
    import socket

    import datasets
    import huggingface_hub.constants as hub

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{closed}")
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)  # not asked to be offline; restored after
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", f"http://127.0.0.1:{closed}")
    with pytest.raises(DataError, match="the Hugging Face Hub does not answer"):
        open_corpus(DataConfig(corpus="hf:nobody/no-such-dataset", cache_dir=str(tmp_path)))
    assert "Retrying" not in capfd.readouterr().err
