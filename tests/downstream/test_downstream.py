"""Downstream evaluations (`train.evals`): the task format, the scoring against its formulas, the
metrics a run logs at every evaluation and at the end, and the checks before training."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from tokenizers import Tokenizer, models, pre_tokenizers

from minimind import MiniMindLM, ModelConfig
from minimind.cli import main
from minimind.data.tokenizer import with_specials
from minimind.downstream.metrics import eval_metric
from minimind.downstream.scoring import evaluate_task, score_requests
from minimind.downstream.tasks import Item, Task, TaskFileError, encode_pair, load_task
from minimind.record import is_maximized
from minimind.stats.intervals import signal_to_noise

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_thread")

ITEMS = [
    {"context": "the cat sat on the", "continuations": [" mat", " dog sat"], "gold": 0},
    {"context": "a dog ran to the", "continuations": [" cat", " mat", " on"], "gold": 2},
    {"context": "on the mat the", "continuations": [" dog", " cat ran"], "gold": 1},
]


def write_task(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def word_tokenizer() -> Tokenizer:
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", " "]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", "isolated")
    return with_specials(tokenizer)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{", "not JSON"),
        ('{"context": "a", "continuations": ["b", "c"]}', "expected exactly the keys"),
        ('{"context": "", "continuations": ["b", "c"], "gold": 0}', "context must be"),
        ('{"context": " \\t ", "continuations": ["b", "c"], "gold": 0}', "context must be"),
        (
            '{"context": "a", "continuations": ["b"], "gold": 0}',
            "continuations must be two or more",
        ),
        ('{"context": "a", "continuations": ["b", "c"], "gold": 2}', "gold must be"),
        ('{"context": "a", "continuations": ["b", "c"], "gold": true}', "gold must be"),
    ],
)
def test_a_bad_item_names_its_line(tmp_path, line, message):
    path = tmp_path / "task.jsonl"
    path.write_text(json.dumps(ITEMS[0]) + "\n\n" + line + "\n")
    with pytest.raises(TaskFileError, match=f"task.jsonl:3: {message}"):
        load_task("t", path, None)


def test_a_task_takes_its_first_limit_items(tmp_path):
    path = write_task(tmp_path / "task.jsonl", ITEMS)
    assert load_task("t", path, 2).items == tuple(
        Item(r["context"], tuple(r["continuations"]), r["gold"]) for r in ITEMS[:2]
    )
    assert len(load_task("t", path, None).items) == 3


def test_trailing_spaces_of_the_context_join_the_continuation_as_in_lm_eval():
    tokenizer = word_tokenizer()
    assert encode_pair(tokenizer, "the cat ", "sat") == encode_pair(tokenizer, "the cat", " sat")
    context, continuation = encode_pair(tokenizer, "the cat", " sat")
    assert context + continuation == tokenizer.encode("the cat sat").ids
    assert continuation == tokenizer.encode(" sat").ids


def model(**fields) -> MiniMindLM:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=16, dim=32, n_layers=2, n_heads=4, max_seq_len=16, **fields)
    return MiniMindLM(config).eval()


@pytest.mark.parametrize("fields", [{}, {"logit_softcap": 2.0, "block": "postnorm"}])
def test_each_request_scores_its_continuation_given_its_context(fields):
    lm, tokenizer = model(**fields), word_tokenizer()
    requests = [encode_pair(tokenizer, r["context"], c) for r in ITEMS for c in r["continuations"]]
    scores = score_requests(lm, requests, pad_id=0)
    for (context, continuation), score in zip(requests, scores, strict=True):
        ids = torch.tensor([context + continuation])
        with torch.no_grad():
            log_probs = lm(ids).logits[0].log_softmax(-1)  # alone, unpadded
        expected = sum(
            log_probs[len(context) + i - 1, token].item() for i, token in enumerate(continuation)
        )
        assert score == pytest.approx(expected, abs=1e-5)


def test_the_measures_equal_their_formulas():
    lm, tokenizer = model(), word_tokenizer()
    task = Task("t", tuple(Item(r["context"], tuple(r["continuations"]), r["gold"]) for r in ITEMS))
    requests = [encode_pair(tokenizer, i.context, c) for i in task.items for c in i.continuations]
    flat = iter(score_requests(lm, requests, pad_id=0))
    logliks = [[next(flat) for _ in item.continuations] for item in task.items]
    golds = [item.gold for item in task.items]
    acc = (
        sum(
            max(range(len(ll)), key=ll.__getitem__) == g
            for ll, g in zip(logliks, golds, strict=True)
        )
        / 3
    )
    normed = [
        [v / len(c) for v, c in zip(ll, item.continuations, strict=True)]
        for ll, item in zip(logliks, task.items, strict=True)
    ]
    acc_norm = (
        sum(max(range(len(n)), key=n.__getitem__) == g for n, g in zip(normed, golds, strict=True))
        / 3
    )
    chance = (1 / 2 + 1 / 3 + 1 / 2) / 3
    gold_bytes = len(" mat") + len(" on") + len(" cat ran")
    bpb = -sum(ll[g] for ll, g in zip(logliks, golds, strict=True)) / (math.log(2) * gold_bytes)
    lm.train()
    measures = evaluate_task(lm, tokenizer, task, pad_id=0)
    assert lm.training  # the mode is given back
    assert measures == pytest.approx(
        {
            "acc": acc,
            "acc_norm": acc_norm,
            "acc_centered": (acc - chance) / (1 - chance),
            "bpb": bpb,
        }
    )


def test_accuracies_are_maximized_and_bpb_minimized():
    assert is_maximized(eval_metric("arc", "acc")) and is_maximized("eval/arc/acc_centered")
    assert not is_maximized(eval_metric("arc", "bpb"))


def test_a_run_logs_the_eval_metrics_at_each_evaluation_and_at_the_end(
    write_spec, mlflow_uri, tmp_path, capsys
):
    path = write_task(tmp_path / "task.jsonl", ITEMS)
    evals = [
        {"name": "toy", "path": path, "limit": 2},
        {"name": "all", "path": path},  # every item
    ]
    # evaluations at steps 3, 6, 9, 12; the tasks every 6 steps and at the end (step 14)
    train = {"steps": 14, "eval_every": 3, "evals": evals, "evals_every": 6}
    spec = write_spec(train=train)
    assert main(["run", str(spec)]) == 0
    client = MlflowClient(mlflow_uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "tiny"]
    (child,) = client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")
    for task in ("toy", "all"):
        for measure in ("acc", "acc_norm", "acc_centered", "bpb"):
            history = client.get_metric_history(child.info.run_id, f"eval/{task}/{measure}")
            assert [point.step for point in history] == [6, 12, 14], (task, measure)
    every_item = client.get_metric_history(child.info.run_id, "eval/all/acc")
    assert all(point.value in (0.0, 1 / 3, 2 / 3, 1.0) for point in every_item)  # three items
    accuracy = client.get_metric_history(child.info.run_id, "eval/toy/acc")
    assert all(point.value in (0.0, 0.5, 1.0) for point in accuracy)  # two items
    capsys.readouterr()
    argv = ["compare", "tiny", "--metric", "eval/toy/acc", "--tracking-uri", mlflow_uri]
    assert main([*argv, "--format", "json"]) == 0  # any eval metric is an objective
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["eval/toy/acc_mean"] == accuracy[-1].value


def test_signal_to_noise_is_the_spread_of_the_means_over_the_seed_sd():
    assert signal_to_noise(np.array([0.30, 0.42, 0.36]), 0.04) == pytest.approx(3.0)
    assert math.isnan(signal_to_noise(np.array([0.30]), 0.04))  # one group: no signal
    assert math.isnan(signal_to_noise(np.array([0.30, 0.42]), math.nan))  # noise unmeasured


def test_bad_eval_tasks_are_spec_errors_before_training(write_spec, tmp_path, capsys):
    long = [{"context": "the cat sat " * 40, "continuations": [" a", " b"], "gold": 0}]
    cases = [
        ({"path": str(tmp_path / "missing.jsonl")}, "train.evals.0.path: ", "cannot be read"),
        (
            {"path": write_task(tmp_path / "long.jsonl", long)},
            "train.evals.0: ",
            "task toy: its longest context + continuation needs",
        ),
        (
            {"path": write_task(tmp_path / "blank.jsonl", [{**ITEMS[0], "context": "  "}])},
            "train.evals.0.path: ",
            "blank.jsonl:1: context must be a string with a non-space character",
        ),
    ]
    for task, field, message in cases:
        spec = write_spec(train={"evals": [{"name": "toy", **task}]})
        assert main(["run", str(spec)]) == 2
        # the last line: the first run of the session prepares the data cache before the check
        error = capsys.readouterr().err.splitlines()[-1]
        assert error.startswith(f"error: {field}") and message in error, error
        assert not (tmp_path / "checkpoints").exists()
    spec = write_spec(train={"evals": [{"name": "toy", "path": "a"}, {"name": "toy", "path": "b"}]})
    assert main(["run", str(spec)]) == 2
    assert "train.evals: task names must be distinct" in capsys.readouterr().err
    spec = write_spec(train={"eval_every": 4, "evals_every": 6})
    assert main(["run", str(spec)]) == 2
    assert (
        "train.evals_every: must be a multiple of train.eval_every (4)" in capsys.readouterr().err
    )


# The Shakespeare study's baseline (experiments/study/base.yaml until the study on real text
# replaced it), whose runs results/study/store held at commit c7454a3.
SHAKESPEARE_STUDY_BASE = """
name: study_base
description: The Shakespeare study's baseline.
train:
  steps: 300
  precision: fp32
  eval_every: 50
  eval_batches: 10
  checkpoint_every: 200
  probe_every: 10
  sample_tokens: 0
seeds: [0, 1, 2]
"""


def test_specs_without_evals_keep_their_hash(tmp_path):
    """The Shakespeare study's baseline hashes as it did before `train.evals` existed, so its runs,
    checkpoints and studies continue; tasks change the hash."""
    from minimind.spec import load_spec, spec_hash

    base = tmp_path / "study_base.yaml"
    base.write_text(f"extends: {REPO / 'experiments' / 'base.yaml'}\n{SHAKESPEARE_STUDY_BASE}")
    assert spec_hash(load_spec(base)) == "22cf421e3586"
    path = write_task(tmp_path / "task.jsonl", ITEMS)
    with_tasks = load_spec(base, [f"train.evals=[{{name: toy, path: {path}}}]"])
    assert spec_hash(with_tasks) != "22cf421e3586"
    assert spec_hash(load_spec(base, ["train.evals_every=100"])) != "22cf421e3586"
