"""The chunked LM loss equals the loss over whole logits, in value and in every gradient, and
never holds every token's logits."""

import pytest
import torch
import torch.nn.functional as F

from minimind import MiniMindLM, ModelConfig
from minimind.model.loss import IGNORE_INDEX, chunked_loss_sum, token_loss_sum
from minimind.training.memory import transient_peak_bytes

pytestmark = pytest.mark.usefixtures("one_thread")


def head_inputs(tokens: int = 30, dim: int = 16, vocab: int = 50, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, dim, generator=generator, dtype=torch.float64).float()
    weight = torch.randn(vocab, dim, generator=generator) * 0.3
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    targets[[3, 17, tokens - 1]] = IGNORE_INDEX
    return hidden.requires_grad_(), weight.requires_grad_(), targets


def softcap_z_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A per-token extra as a soft cap and a z-loss would add: tanh cap, then lse^2 on kept
    tokens."""
    capped = 5.0 * torch.tanh(logits / 5.0)
    kept = targets != IGNORE_INDEX
    z = capped.logsumexp(dim=-1)[kept].square().sum()
    return token_loss_sum(capped, targets) + 1e-2 * z


@pytest.mark.parametrize("chunk", [1, 7, 30, 64])
@pytest.mark.parametrize("loss_sum", [token_loss_sum, softcap_z_loss], ids=["ce", "softcap_z"])
def test_chunked_loss_equals_the_whole_logits_loss_and_its_gradients(chunk, loss_sum):
    hidden, weight, targets = head_inputs()
    expected = loss_sum(F.linear(hidden, weight).float(), targets)
    expected_grads = torch.autograd.grad(expected, (hidden, weight))
    reference = F.cross_entropy(  # the torch built-in, independent of token_loss_sum
        F.linear(hidden, weight), targets, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    if loss_sum is token_loss_sum:
        torch.testing.assert_close(expected, reference, rtol=1e-6, atol=0)

    loss = chunked_loss_sum(hidden, weight, targets, chunk, loss_sum)
    grads = torch.autograd.grad(loss, (hidden, weight))
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_chunked_loss_rejects_a_chunk_below_one():
    hidden, weight, targets = head_inputs()
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_loss_sum(hidden, weight, targets, 0)


@pytest.mark.parametrize("tied", [True, False])
def test_model_loss_in_chunks_equals_the_plain_loss_and_every_gradient(tied):
    config = ModelConfig.preset(
        "tiny", dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, max_seq_len=16
    ).replace(tie_embeddings=tied)
    torch.manual_seed(0)
    model = MiniMindLM(config)
    ids = torch.randint(0, 97, (3, 16), generator=torch.Generator().manual_seed(1))
    ids[1, 5] = IGNORE_INDEX  # an ignored label inside the batch
    inputs = ids.clamp(min=0)

    def loss_and_grads(chunk):
        model.zero_grad(set_to_none=True)
        out = model(inputs, labels=ids, loss_chunk_tokens=chunk)
        out.loss.backward()
        params = model.named_parameters(remove_duplicate=False)  # lm_head.weight even when tied
        return out, {name: p.grad.clone() for name, p in params}

    plain, plain_grads = loss_and_grads(None)
    chunked, chunked_grads = loss_and_grads(5)
    assert chunked.logits is None and plain.logits is not None
    torch.testing.assert_close(chunked.loss, plain.loss, rtol=1e-6, atol=0)
    assert "lm_head.weight" in chunked_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_chunked_loss_never_holds_every_tokens_logits():
    tokens, vocab, chunk = 512, 4096, 64
    hidden, weight, targets = head_inputs(tokens=tokens, dim=32, vocab=vocab)
    logits_bytes = tokens * vocab * 4

    def step(chunk_tokens):
        def run():
            if chunk_tokens is None:
                loss = token_loss_sum(F.linear(hidden, weight), targets)
            else:
                loss = chunked_loss_sum(hidden, weight, targets, chunk_tokens)
            loss.backward()
            hidden.grad = weight.grad = None

        return run

    cpu = torch.device("cpu")
    assert transient_peak_bytes(step(None), cpu) > logits_bytes
    # a chunk's logits and their gradient, and the [V, D] weight gradient: far below [N, V]
    assert transient_peak_bytes(step(chunk), cpu) < logits_bytes / 2
