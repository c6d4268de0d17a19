"""`data.doc_mask`: block-causal attention within packed documents, against the formula and a
per-document forward pass; `data.bos_align` windows through the trainer."""

import pytest
import torch

from minimind.data.batches import document_ids
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from registry.attention import DocumentMask, document_attention

EOS = 2


def packed_batch() -> torch.Tensor:
    """Two rows of documents ending with EOS, the second row's last document cut by the window."""
    rows = [
        [5, 6, 7, EOS, 8, 9, EOS, 10, 11, 12, 13, EOS],
        [14, EOS, 15, 16, 17, 18, 19, EOS, 20, 21, 22, 23],
    ]
    return torch.tensor(rows)


def test_document_ids_count_eos_before_each_token():
    ids = document_ids(packed_batch(), EOS)
    assert ids.tolist() == [
        [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2],
        [0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2],
    ]


def test_dense_mask_is_causal_and_within_documents():
    ids = document_ids(packed_batch(), EOS)
    mask = DocumentMask(ids).dense()
    assert mask.shape == (2, 1, 12, 12)
    for b in range(2):
        for q in range(12):
            for k in range(12):
                allowed = k <= q and bool(ids[b, q] == ids[b, k])
                assert bool(mask[b, 0, q, k]) == allowed


def model(**changes) -> MiniMindLM:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "tiny", vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, **changes
    )
    return MiniMindLM(cfg).eval()


@pytest.mark.parametrize("position", ["rope", "rope-gptj"])
def test_masked_forward_equals_each_document_forwarded_alone(position):
    # Rotary positions are relative, so a document forwarded alone from position 0 must give the
    # logits it gets at its offset inside the packed window.
    lm, batch = model(position=position), packed_batch()
    ids = document_ids(batch, EOS)
    with torch.no_grad():
        packed = lm(batch, doc_ids=ids).logits
        for b in range(batch.size(0)):
            for doc in ids[b].unique():
                where = (ids[b] == doc).nonzero().flatten()
                alone = lm(batch[b : b + 1, where]).logits[0]
                torch.testing.assert_close(packed[b, where], alone, atol=1e-5, rtol=1e-4)
        unmasked = lm(batch).logits
    assert not torch.allclose(packed[:, 4:], unmasked[:, 4:], atol=1e-4)  # the mask matters


def test_masked_forward_is_causal_and_blind_to_other_documents():
    lm, batch = model(), packed_batch()
    ids = document_ids(batch, EOS)
    with torch.no_grad():
        base = lm(batch, doc_ids=ids).logits
        changed = batch.clone()
        changed[0, 0:3] = torch.tensor([30, 31, 32])  # the first document of row 0
        changed[0, 11] = 33  # a later token: nothing before it may change
        other = lm(changed, doc_ids=document_ids(changed, EOS)).logits
    torch.testing.assert_close(other[0, 4:11], base[0, 4:11], atol=1e-6, rtol=0)
    torch.testing.assert_close(other[1], base[1], atol=1e-6, rtol=0)
    assert not torch.allclose(other[0, :4], base[0, :4])  # its EOS (position 3) included


def test_flex_attention_path_equals_the_sdpa_path():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    batch = packed_batch().to(device)
    mask = DocumentMask(document_ids(batch, EOS))
    q = torch.randn(2, 4, 12, 16, device=device)
    k, v = torch.randn(2, 2, 12, 16, device=device), torch.randn(2, 2, 12, 16, device=device)
    dense = document_attention(q, k, v, mask, 0.0, flex=False)
    try:
        flexed = document_attention(q, k, v, mask, 0.0, flex=True)
    except Exception as e:  # a CPU build without FlexAttention's CPU kernels
        pytest.skip(f"FlexAttention unavailable on {device}: {e}")
    assert flex is not None
    torch.testing.assert_close(flexed, dense, atol=1e-5, rtol=1e-4)


def test_gradients_do_not_cross_documents():
    lm, batch = model(), packed_batch()
    lm.train()
    embeddings = lm.embed_tokens
    captured = {}

    def keep(module, args, output):
        output.retain_grad()
        captured["x"] = output

    handle = embeddings.register_forward_hook(keep)
    logits = lm(batch, doc_ids=document_ids(batch, EOS)).logits
    handle.remove()
    logits[0, 5].sum().backward()  # a token of row 0's second document
    grad = captured["x"].grad[0].abs().sum(-1)
    assert (grad[[4, 5]] > 0).all() and (grad[:4] == 0).all() and (grad[6:] == 0).all()
