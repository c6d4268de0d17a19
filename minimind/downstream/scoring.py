"""Scoring downstream tasks with a MiniMind model.

Per item with continuations c_1..c_n and the right one g (OLMo in-loop, DCLM CORE, lm-eval):
- `acc`: 1 when argmax_i log P(c_i | context) is g;
- `acc_norm`: the same with each log-likelihood divided by its continuation's length in
  characters (lm-eval's acc_norm), which removes the bias towards short answers;
- `acc_centered`: (acc - chance) / (1 - chance), chance the mean of 1/n over the items, so 0 is
  guessing and 1 is perfect whatever the number of choices (DCLM's centered accuracy);
- `bpb`: bits per UTF-8 byte of the gold continuations, -Σ log2 P(c_g | context) / Σ bytes(c_g),
  a smooth figure that moves long before the accuracy leaves chance (OLMo's in-loop bpb).
The requests run in batches of sequences (context + continuation)[:-1], right-padded: the model is
causal, so padding after a request changes nothing before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tokenizers import Tokenizer

from minimind.downstream.tasks import Task, encode_pair
from minimind.model.lm import MiniMindLM

BATCH_SEQUENCES = 32


@torch.no_grad()
def score_requests(
    model: MiniMindLM, requests: Sequence[tuple[list[int], list[int]]], pad_id: int
) -> list[float]:
    """log P(continuation | context) in nats of (context ids, continuation ids) requests, in
    order: the softmax over every row of the LM head, as the training loss and lm-eval take it.
    Requests of similar lengths share a batch (sorted by length), so little is padding."""
    device = model.embed_tokens.weight.device
    inputs = [(context + continuation)[:-1] for context, continuation in requests]
    order = sorted(range(len(requests)), key=lambda i: len(inputs[i]))
    scores = [0.0] * len(requests)
    for start in range(0, len(order), BATCH_SEQUENCES):
        batch = order[start : start + BATCH_SEQUENCES]
        width = len(inputs[batch[-1]])
        x = torch.full((len(batch), width), pad_id, dtype=torch.long)
        # each position's next token where it belongs to the continuation, else -1 (unscored)
        targets = torch.full((len(batch), width), -1, dtype=torch.long)
        for row, i in enumerate(batch):
            continuation, length = requests[i][1], len(inputs[i])
            x[row, :length] = torch.tensor(inputs[i])
            targets[row, length - len(continuation) : length] = torch.tensor(continuation)
        targets = targets.to(device)
        log_probs = model(x.to(device)).logits.float().log_softmax(-1)  # [B, T, V]
        picked = log_probs.gather(-1, targets.clamp_min(0)[..., None]).squeeze(-1)  # [B, T]
        sums = torch.where(targets >= 0, picked, 0.0).sum(-1).tolist()
        for row, i in enumerate(batch):
            scores[i] = sums[row]
    return scores


def evaluate_task(
    model: MiniMindLM, tokenizer: Tokenizer, task: Task, pad_id: int
) -> dict[str, float]:
    """The task's measures (`metrics.MEASURES`) for `model` (in eval mode for the call; its mode is restored)."""
    requests = [
        encode_pair(tokenizer, item.context, continuation)
        for item in task.items
        for continuation in item.continuations
    ]
    training = model.training
    model.eval()
    try:
        scores = iter(score_requests(model, requests, pad_id))
    finally:
        model.train(training)
    correct = correct_norm = chance = gold_nats = gold_bytes = 0.0
    for item in task.items:
        logliks = [next(scores) for _ in item.continuations]
        normed = [ll / len(c) for ll, c in zip(logliks, item.continuations, strict=True)]
        correct += _argmax(logliks) == item.gold
        correct_norm += _argmax(normed) == item.gold
        chance += 1 / len(item.continuations)
        gold_nats -= logliks[item.gold]
        gold_bytes += len(item.continuations[item.gold].encode("utf-8"))
    n = len(task.items)
    acc, chance = correct / n, chance / n
    return {
        "acc": acc,
        "acc_norm": correct_norm / n,
        "acc_centered": (acc - chance) / (1 - chance),
        "bpb": gold_nats / (math.log(2) * gold_bytes),
    }


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)  # the first of ties, as numpy
