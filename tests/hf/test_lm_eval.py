"""lm-eval on an export: its per-request log-likelihoods on a local multiple-choice task equal the
harness's own scoring of the same requests (`minimind.downstream`), for an export to Llama and
one that ships its model code. Skipped where lm-eval is not installed (extra `eval`)."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("transformers")

from minimind import MiniMindLM, ModelConfig  # noqa: E402
from minimind.data.tokenizer import train_bpe  # noqa: E402
from minimind.downstream.scoring import score_requests  # noqa: E402
from minimind.downstream.tasks import encode_pair  # noqa: E402
from minimind.hf.export import export_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

ITEMS = [
    {"context": "The cat sat on the", "continuations": [" mat", " moon", " dog's tail"], "gold": 0},
    {"context": "Water is ", "continuations": ["wet", "dry"], "gold": 0},  # a trailing space
    {"context": "One, two,", "continuations": [" three", " four", " five", " six"], "gold": 0},
    {"context": "Bread and", "continuations": [" butter", " jam"], "gold": 1},
]

# lm-eval's task config for the local JSONL file: the harness's format as is.
TASK_YAML = """task: minimind_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: continuations
doc_to_target: gold
target_delimiter: ""
metric_list:
  - metric: acc
"""

# lm-eval in a process of its own, the hub offline: for each export in argv[3:], each request's
# (context, continuation, log-likelihood), into the JSON file argv[1].
LM_EVAL = """
import json, sys
import lm_eval
from lm_eval.tasks import TaskManager
results = {}
for export in sys.argv[3:]:
    out = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": export, "trust_remote_code": True, "dtype": "float32",
                    "device": "cpu"},
        tasks=["minimind_local"],
        task_manager=TaskManager(include_path=sys.argv[2]),
        batch_size=2,
        log_samples=True,
    )
    results[export] = [
        [*arguments, response[0][0]]  # resps: [(loglikelihood, is_greedy)] per request
        for sample in out["samples"]["minimind_local"]
        for arguments, response in zip(sample["arguments"], sample["resps"])
    ]
json.dump(results, open(sys.argv[1], "w"))
"""


@pytest.mark.slow  # lm-eval takes half a minute to import
def test_lm_eval_log_likelihoods_equal_the_harness_scoring(tmp_path):
    text = " ".join(" ".join(item["continuations"]) + " " + item["context"] for item in ITEMS)
    tokenizer = train_bpe([text * 20], vocab_size=300)
    models = {}
    for block, arch in (("prenorm", "llama"), ("postnorm", "minimind")):  # the model code too
        torch.manual_seed(0)
        config = ModelConfig(
            vocab_size=320, dim=32, n_layers=2, n_heads=4, max_seq_len=32, block=block
        )
        model = MiniMindLM(config).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        out = str(tmp_path / block)
        assert export_model(model, tokenizer, out) == arch
        models[out] = model

    task_dir = tmp_path / "tasks"
    task_dir.mkdir()
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    (task_dir / "minimind_local.yaml").write_text(TASK_YAML.format(path=items))
    results = tmp_path / "lm_eval.json"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "datasets"),
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", LM_EVAL, str(results), str(task_dir), *models],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = [(i["context"], c) for i in ITEMS for c in i["continuations"]]
    for out, rows in json.loads(results.read_text()).items():
        assert sorted((c, x) for c, x, _ in rows) == sorted(expected)  # every request, as written
        requests = [
            encode_pair(tokenizer, context, continuation) for context, continuation, _ in rows
        ]
        ours = score_requests(models[out], requests, pad_id=0)
        theirs = [loglikelihood for _, _, loglikelihood in rows]
        assert ours == pytest.approx(theirs, abs=1e-4), out
