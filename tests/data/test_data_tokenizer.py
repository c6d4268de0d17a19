"""Byte-level BPE: specials, exact round trips, and chunked tokenization equal to whole-text."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from minimind.data.chunking import HARD_LIMIT_CHARS, MAX_CHUNK_FACTOR, text_chunks
from minimind.data.sources import read_text_corpus
from minimind.data.tokenizer import BOS, EOS, PAD, load_tokenizer, special_ids, train_bpe
from minimind.data.tokens import ENCODE_CHARS, encode_documents, token_dtype

TRICKY = [
    "",
    "plain ascii",
    "  leading and trailing spaces  ",
    "tabs\tand\r\nwindows\rlines\n\n\nblank lines\n \n \n",
    "emoji 🤖🎉 and CJK 漢字かな and combining e\u0301",
    "null \x00 and control \x1b[0m bytes",
    "special strings <|eos|><|bos|><|pad|> stay text",
    "\u2028 \u00a0 \u3000 unicode spaces",
]


@pytest.fixture(scope="module")
def shakespeare_text() -> str:
    return read_text_corpus("tinyshakespeare").decode()


@pytest.fixture(scope="module")
def tokenizer(shakespeare_text) -> Tokenizer:
    return train_bpe([shakespeare_text[:200_000]], vocab_size=512)


def test_specials_are_distinct_and_first(tokenizer):
    ids = special_ids(tokenizer)
    assert (ids.pad, ids.bos, ids.eos) == (0, 1, 2)
    assert tokenizer.id_to_token(0) == PAD and tokenizer.id_to_token(2) == EOS
    assert tokenizer.get_vocab_size() == 512


@pytest.mark.parametrize("text", TRICKY)
def test_round_trip_is_exact(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text


def test_plain_text_never_produces_special_ids(tokenizer):
    ids = tokenizer.encode(f"{PAD} {BOS} {EOS}{EOS}").ids
    assert not {0, 1, 2} & set(ids)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_any_text(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_trained_on_the_given_text_only(shakespeare_text):
    # A word absent from the training text is not a single token; present words are.
    tok = train_bpe([shakespeare_text[:200_000]], vocab_size=1024)
    assert len(tok.encode(" the").ids) == 1
    assert len(tok.encode(" zyzzyva").ids) > 1


def test_reload_keeps_specials_as_text(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    reloaded = load_tokenizer(path)
    text = f"x{EOS}y"
    assert reloaded.encode(text).ids == tokenizer.encode(text).ids
    assert 2 not in reloaded.encode(text).ids


def test_loading_a_foreign_tokenizer_adds_missing_specials(shakespeare_text, tmp_path):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    foreign = Tokenizer(models.BPE())
    foreign.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    foreign.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", EOS], show_progress=False
    )
    foreign.train_from_iterator([shakespeare_text[:20_000]], trainer=trainer)
    path = tmp_path / "tokenizer.json"
    foreign.save(str(path))
    loaded = load_tokenizer(path)
    ids = special_ids(loaded)
    assert ids.eos == foreign.token_to_id(EOS)  # kept where it was
    assert {ids.pad, ids.bos} == {300, 301}  # appended
    assert loaded.get_vocab_size() == 302


# Pieces that stress the pre-tokenizer's pattern at a cut: contractions, runs of whitespace.
PIECES = list("ab 1.'s\n\t\r!é") + ["'s", "\n\n", " \n"]


@pytest.fixture(scope="module")
def whitespace_tokenizer() -> Tokenizer:
    """A BPE with merges inside whitespace runs, so a cut that splits a run changes the ids."""
    rng = random.Random(0)
    text = "".join(rng.choice(PIECES) for _ in range(50_000))
    tok = train_bpe([text], vocab_size=400)
    assert len(tok.encode("\n\n\n").ids) == 1 and len(tok.encode(" \n").ids) == 1
    return tok


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES)).map("".join), st.integers(min_value=1, max_value=8))
def test_chunked_encoding_equals_whole_text(whitespace_tokenizer, text, target_chars):
    chunks = list(text_chunks(text, target_chars))
    assert "".join(chunks) == text
    chunked = [i for enc in whitespace_tokenizer.encode_batch(chunks) for i in enc.ids]
    assert chunked == whitespace_tokenizer.encode(text).ids


def test_chunked_shakespeare_equals_whole_text(tokenizer, shakespeare_text):
    text = shakespeare_text[-120_000:]
    chunks = list(text_chunks(text, 4096))
    assert len(chunks) > 10 and "".join(chunks) == text
    chunked = [i for enc in tokenizer.encode_batch(chunks) for i in enc.ids]
    assert chunked == tokenizer.encode(text).ids


def test_encoded_documents_are_each_documents_ids_then_eos(tokenizer, shakespeare_text):
    """The batch's ids gathered with numpy equal each document encoded alone, then EOS; an
    empty document adds nothing, and a long one is encoded in chunks."""
    eos = special_ids(tokenizer).eos
    texts = ["Hello there.", "", shakespeare_text[:200_000], *TRICKY]
    tokens, lengths = encode_documents(tokenizer, texts, eos)
    expected = [
        [*tokenizer.encode(text, add_special_tokens=False).ids, eos] if text else []
        for text in texts
    ]
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert tokens.tolist() == [i for ids in expected for i in ids]
    assert len(list(text_chunks(texts[2]))) > 1  # the long one was cut


def test_token_dtype_fits_the_vocab():
    assert token_dtype(2048) == np.uint16
    assert token_dtype(65_536) == np.uint16  # ids 0..65535
    assert token_dtype(65_537) == np.uint32


def test_a_single_line_document_is_cut_into_bounded_pieces_that_encode_exactly(tokenizer):
    """A long document without a newline (a 17 MB single-line corpus took 4 GB whole) is cut
    before single spaces, which byte-level BPE always starts a piece with: the ids are those of
    the whole text, and no piece is longer than `MAX_CHUNK_FACTOR` targets."""
    rng = random.Random(1)
    words = ["the", "king's", "42", "!!", "é", "  ", "\t", "--", "x"]
    text = "".join(rng.choice(words) + " " for _ in range(30_000))  # no newline at all
    chunks = list(text_chunks(text, 1024))
    assert "".join(chunks) == text
    assert len(chunks) > 10 and max(map(len, chunks)) <= MAX_CHUNK_FACTOR * 1024
    chunked = [i for enc in tokenizer.encode_batch(chunks) for i in enc.ids]
    assert chunked == tokenizer.encode(text).ids


def test_a_text_without_whitespace_is_cut_at_the_hard_bound():
    text = "ab" * HARD_LIMIT_CHARS
    chunks = list(text_chunks(text, 1000))
    assert "".join(chunks) == text and [len(c) for c in chunks] == [HARD_LIMIT_CHARS] * 2


def test_a_long_document_reaches_the_tokenizer_in_bounded_calls(tokenizer, shakespeare_text):
    """What one `encode_batch` call holds (its encodings take hundreds of bytes a character) is
    bounded however long the document; the ids are those of the whole text, then EOS."""
    calls = []

    class Counting:
        def encode_batch(self, texts, **kwargs):
            calls.append(sum(map(len, texts)))
            return tokenizer.encode_batch(texts, **kwargs)

    text = shakespeare_text.replace("\n", " ") * 4  # one line of about 4.5 million characters
    eos = special_ids(tokenizer).eos
    tokens, lengths = encode_documents(Counting(), [text], eos)
    assert len(calls) > 1 and max(calls) <= ENCODE_CHARS
    assert tokens.tolist() == [*tokenizer.encode(text, add_special_tokens=False).ids, eos]
    assert lengths.tolist() == [len(tokens)]
