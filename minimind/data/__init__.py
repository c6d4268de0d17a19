"""Corpora, tokenizers, token shards, training and validation batches.

data = prepare_data(DataConfig(corpus="tinyshakespeare"))  # or a mixture, `data.sources`
batches = TrainBatches(data.train_tokens, batch_size=16, seq_len=128, seed=0)
val = fixed_val_batches(data.val_tokens, batch_size=16, seq_len=128, n_batches=10)
bpb = bits_per_byte(mean_val_loss, len(data.val_tokens), data.val_bytes)

The batches (torch tensors) are imported from `minimind.data.batches`: the spec validates a
`data:` section through this package, and a spec error must not wait for torch.
"""

from minimind.data.bpb import bits_per_byte
from minimind.data.config import DataConfig, TokenizerConfig
from minimind.data.errors import DataError
from minimind.data.mixture import prepare_data
from minimind.data.prepare import PreparedData

__all__ = [
    "DataConfig",
    "DataError",
    "PreparedData",
    "TokenizerConfig",
    "bits_per_byte",
    "prepare_data",
]
