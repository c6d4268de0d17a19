"""data suite: BPE training time, tokenization throughput, and batch sampling within a step.

On the embedded corpus's training split (quick: its first 64 KiB): training the default
2048-token byte-level BPE, then tokenizing the split into a token file as `prepare_data` does.
Both are single calls repeated `rounds` times (median reported); the tokenizers library uses
its own thread pool, not torch's. Batch sampling (`TrainBatches`, plus the copy to the device)
is timed in alternation with a training step of the tiny preset at the default batch 16 × 128,
and reported as a share of the step (quick: batch 4 × 64).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from minimind.bench import corpus_scale
from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.bench.steps import Trainee
from minimind.data import DataConfig
from minimind.data.batches import TrainBatches
from minimind.data.sources import open_corpus, read_text_corpus, split_text
from minimind.data.tokenizer import special_ids, train_bpe
from minimind.data.tokens import ShardJob, TokenStream, shard_paths, token_dtype, tokenize_piece
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.training.device import pins_memory
from minimind.training.timing import interleave, median, paired_ratio, time_call

SUITE = "data"
CORPUS, VOCAB = "tinyshakespeare", 2048
BATCH, SEQ = 16, 128
QUICK_CHARS = 64 * 1024
QUICK_BATCH, QUICK_SEQ = 4, 64


def run(ctx: BenchContext) -> list[Row]:
    train, _ = split_text(CORPUS, read_text_corpus(CORPUS), val_fraction=0.1)
    documents = [train[:QUICK_CHARS] if ctx.quick else train]
    n_bytes = sum(len(doc.encode()) for doc in documents)
    repeats = ctx.rounds
    ctx.log(f"[data] BPE and tokenization of {n_bytes / 1e6:.2f} MB, {repeats} times each")
    cpu = torch.device("cpu")
    trained = []  # each timed call's tokenizer: the last one is used below
    bpe_s = [
        time_call(lambda: trained.append(train_bpe(documents, VOCAB)), cpu) for _ in range(repeats)
    ]
    tokenizer = trained[-1]
    dtype = token_dtype(tokenizer.get_vocab_size())
    eos = special_ids(tokenizer).eos
    with tempfile.TemporaryDirectory() as tmp:
        # The split as a one-text corpus of its own, tokenized as `prepare_data` does a piece.
        text_file = Path(tmp) / "train.txt"
        text_file.write_text(documents[0])
        corpus = open_corpus(DataConfig(corpus=str(text_file), cache_dir=tmp))
        job = ShardJob(corpus, corpus.pieces[0], 0, tokenizer.to_str(), eos, dtype.name, Path(tmp))
        encode_s = [time_call(lambda: tokenize_piece(job), cpu) for _ in range(repeats)]
        tokens = np.asarray(TokenStream([shard_paths(Path(tmp), 0, "train")[0]], dtype))
    batch, seq = (QUICK_BATCH, QUICK_SEQ) if ctx.quick else (BATCH, SEQ)
    share, step_ms = _sampling_share(ctx, tokens, tokenizer.get_vocab_size(), batch, seq)
    scope = "first 64 KiB" if ctx.quick else "training split"
    return corpus_scale.run(ctx) + [
        Row(
            SUITE,
            f"BPE training, vocab {VOCAB}, {CORPUS} {scope}",
            median(bpe_s),
            "s",
            detail=f"{n_bytes / 1e6:.2f} MB",
        ),
        Row(
            SUITE,
            f"tokenization throughput, {CORPUS} {scope}",
            n_bytes / 1e6 / median(encode_s),
            "MB/s",
            detail=f"{len(tokens) / median(encode_s):,.0f} tokens/s",
        ),
        Row(
            SUITE,
            f"batch sampling {batch}x{seq} / tiny training step",
            100 * share,
            "%",
            Target("<", 1.0),
            f"step {step_ms:,.1f} ms",
        ),
    ]


def _sampling_share(
    ctx: BenchContext, tokens: np.ndarray, vocab: int, batch: int, seq: int
) -> tuple[float, float]:
    """(median share of batch sampling in a step, median step ms), timed in alternation."""
    device = ctx.device
    batches = TrainBatches(tokens, batch, seq, seed=0, pin_memory=pins_memory(device))
    torch.manual_seed(0)
    with device:
        model = MiniMindLM(ModelConfig.preset("tiny", vocab_size=vocab))
    trainee = Trainee.create(model, vocab, batch, seq)
    candidates = {
        "sample": lambda: next(batches).to(device, non_blocking=True),
        "step": trainee.step_fn(),
    }
    ctx.log(f"[data] batch sampling vs step: 2 candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup)
    return paired_ratio(times["sample"], times["step"]), median(times["step"]) * 1e3
