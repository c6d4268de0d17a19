"""`export_model`: a MiniMind model and its tokenizer as a directory transformers loads offline.

    out_dir/
      config.json              LlamaConfig, MixtralConfig, or MiniMindConfig with `auto_map`
      generation_config.json   bos/eos/pad ids, greedy decoding, the padded ids suppressed
      model.safetensors        the weights (a tied head stored once, tied again on load)
      tokenizer.json, tokenizer_config.json, special_tokens_map.json
      configuration_minimind.py, modeling_minimind.py   (only without an exact architecture)

`AutoModelForCausalLM.from_pretrained(out_dir)` loads it (add `trust_remote_code=True` for a
MiniMindConfig) and `AutoTokenizer.from_pretrained(out_dir)` the tokenizer, as a fast tokenizer.
The directory is written beside `out_dir` and renamed into place, so a failed export leaves none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tokenizers import Tokenizer
from transformers import GenerationConfig, PreTrainedTokenizerFast
from transformers.utils.logging import disable_progress_bar

from minimind.data.tokenizer import BOS, EOS, PAD, special_ids
from minimind.foundations.errors import MinimindError
from minimind.hf.configuration_minimind import MiniMindConfig
from minimind.hf.convert import architecture, to_hf
from minimind.hf.modeling_minimind import MiniMindForCausalLM
from minimind.model.lm import MiniMindLM


class ExportError(MinimindError):
    """An export that cannot be written; the message starts with the argument it concerns."""


def export_model(model: MiniMindLM, tokenizer: Tokenizer, out_dir: str | Path) -> str:
    """Write `model` and `tokenizer` to `out_dir` (absent or empty); returns the architecture
    (`llama`, `mixtral` or `minimind`). ValueError names a component with no exact export."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"out_dir: {out_dir} exists and is not an empty directory")
    arch = architecture(model.config)  # before anything is written
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ExportError(
            f"tokenizer: {tokenizer.get_vocab_size()} tokens, more than the model's vocab_size "
            f"{model.config.vocab_size}"
        )
    hf = to_hf(model.eval()).cpu()
    if arch == "minimind":  # save_pretrained then copies the model code and writes `auto_map`
        MiniMindConfig.register_for_auto_class()
        MiniMindForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    ids = special_ids(tokenizer)
    hf.config.bos_token_id, hf.config.eos_token_id = ids.bos, ids.eos
    hf.config.pad_token_id = ids.pad
    padded = range(model.config.vocab_size, model.config.padded_vocab_size)
    hf.generation_config = GenerationConfig(
        bos_token_id=ids.bos,
        eos_token_id=ids.eos,
        pad_token_id=ids.pad,
        do_sample=False,
        # the harness never samples a padded row's id: neither may generate
        suppress_tokens=list(padded) or None,
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=model.config.max_seq_len,
    )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    disable_progress_bar()  # transformers' bar per file written
    try:
        hf.save_pretrained(staging)
        fast.save_pretrained(staging)
        _usual_permissions(staging)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return arch


def _usual_permissions(directory: Path) -> None:
    """The modes a plain `mkdir` and `open` give under the user's umask: `mkdtemp` makes the
    staging directory 0700, which a model directory shared with others should not be."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
