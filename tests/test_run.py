"""`minimind run` end to end: MLflow layout, failures, signals, bad input and `--dry-run`."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from minimind.cli import main
from minimind.record import RUN_METRICS
from minimind.run.provenance import source_state
from minimind.spec import expand, load_spec, spec_hash
from minimind.tracking import git_commit
from minimind.training.device import CPU_BF16_MIN_DIM, autocast_dtype, resolve_device
from minimind.training.machine import environment
from minimind.training.trainer import Trainer
from tests.conftest import EXPERIMENTS, NEEDS_ASSEMBLED_CORPUS, shipped_specs

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
EXPECTED_METRICS = {
    "train/loss",
    "train/aux_loss",
    "val/loss",
    "val/bpb",
    "val/loss_sampled",
    "val/bpb_sampled",
    "opt/lr",
    "opt/grad_norm",
    "perf/tokens_per_s",
    "perf/step_ms",
    "perf/mfu",
    "sys/peak_mem_mb",
    "train/tokens",
    "time/elapsed_s",
    "time/first_step_s",
}


def test_the_expected_metrics_are_the_run_metrics_of_a_dense_model():
    """Written out above on purpose, and held equal to what sweeps and the comparison table
    read, so the two lists cannot drift apart. An MoE adds its load; `train.z_loss` its term."""
    assert EXPECTED_METRICS | {"moe/load_cv", "train/z_loss"} == set(RUN_METRICS)


def runs_of(uri: str, experiment: str) -> tuple[MlflowClient, list, list]:
    """(client, parent runs, child runs) of an experiment."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("minimind.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("minimind.role") == "child"]
    return client, parents, children


def steps_of(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_run_logs_parent_children_params_tags_metrics_and_artifacts(write_spec, mlflow_uri, capsys):
    path = write_spec(seeds=[0, 1], ablate={"model.norm": ["rmsnorm", "layernorm"]})
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "norm=layernorm/seed1: FINISHED at step 12" in out
    assert "val/bpb" in out  # the comparison table

    client, parents, children = runs_of(mlflow_uri, "tiny")
    spec = load_spec(path)
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["plan_hash"] == spec_hash(spec)
    assert {c.info.run_name for c in children} == {
        f"norm={norm}/seed{seed}" for norm in ("rmsnorm", "layernorm") for seed in (0, 1)
    }
    commit = git_commit()
    device = resolve_device("auto")  # the spec's train.device
    dim = spec.model_config_obj().dim
    precision = "fp32" if autocast_dtype("auto", device, dim) is None else "bf16"
    for child in children:
        tags, params = child.data.tags, child.data.params
        variant, seed = child.info.run_name.split("/seed")
        assert child.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["variant"] == variant and tags["seed"] == seed
        assert tags["plan_hash"] == spec_hash(spec)
        assert tags["component.norm"] == variant.removeprefix("norm=")
        assert tags["component.attention"] == "gqa" and tags["component.mlp"] == "swiglu"
        assert tags["device"] == device.type and tags["precision"] == precision
        assert ("gpu_name" in tags) == (device.type == "cuda")
        if commit is not None:
            assert tags["git_commit"] == commit
        cfg = next(v for v in expand(spec) if v.name == variant).spec.model_config_obj()
        assert params["model.norm"] == variant.removeprefix("norm=")
        assert params["train.steps"] == "12" and params["model.dim"] == "32"
        assert params["seed"] == seed
        assert params["num_params"] == str(cfg.num_params())
        assert params["flops_per_token"] == str(cfg.flops_per_token(32))
        # The spike guard runs on every step: its scores come with every run.
        spikes = {"probe/spike/loss", "probe/spike/grad_norm", "probe/spike/count"}
        assert set(child.data.metrics) == EXPECTED_METRICS | spikes
        assert steps_of(client, child.info.run_id, "train/loss") == [3, 6, 9, 12]
        assert steps_of(client, child.info.run_id, "val/bpb_sampled") == [6, 12]
        assert steps_of(client, child.info.run_id, "val/bpb") == [12]  # exact, at the end
        # Provenance: the machine's libraries and CPU, the tree's state, torch's whole build.
        for item, value in environment(device).items():
            assert tags[f"env.{item}"] == value
        state = source_state()
        assert tags.get("git_dirty") == {None: None, True: "true", False: "false"}[state.dirty]
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert artifacts == {
            "spec.yaml",
            "model_summary.txt",
            "samples.txt",
            "loss.png",
            "environment",
        }
        logged = {a.path for a in client.list_artifacts(child.info.run_id, "environment")}
        assert logged == {"environment/torch_config.txt"} | (
            {"environment/git_diff.patch"} if state.dirty else set()
        )
    # Same seed, same data and init: the two variants differ only by the norm, which must show.
    losses = {c.info.run_name: c.data.metrics["train/loss"] for c in children}
    for seed in ("seed0", "seed1"):
        assert losses[f"norm=rmsnorm/{seed}"] != losses[f"norm=layernorm/{seed}"]


def test_a_non_finite_loss_fails_its_run_and_the_others_go_on(write_spec, mlflow_uri, capsys):
    path = write_spec(ablate={"train.optimizer.lr": [1.0e6, 3.0e-3]})
    assert main(["run", str(path)]) == 1
    _, (parent,), children = runs_of(mlflow_uri, "tiny")
    status = {c.info.run_name: c.info.status for c in children}
    assert status == {"lr=1000000.0/seed0": "FAILED", "lr=0.003/seed0": "FINISHED"}
    failed = next(c for c in children if c.info.status == "FAILED")
    # The guard names the metric that went non-finite first, its step and its parameter group.
    reason = failed.data.tags["failure_reason"]
    assert reason.startswith("non-finite ") and " at step " in reason
    assert parent.info.status == "FAILED"
    assert "lr=1000000.0/seed0" in parent.data.tags["failure_reason"]


def test_an_exception_fails_its_run_and_the_others_go_on(write_spec, mlflow_uri, monkeypatch):
    original = Trainer.fit

    def fit(self, sink, *args, **kwargs):
        if self.model_cfg.norm == "layernorm":
            raise RuntimeError("boom")
        return original(self, sink, *args, **kwargs)

    monkeypatch.setattr(Trainer, "fit", fit)
    path = write_spec(ablate={"model.norm": ["layernorm", "rmsnorm"]})
    assert main(["run", str(path)]) == 1
    _, (parent,), children = runs_of(mlflow_uri, "tiny")
    status = {c.info.run_name: c.info.status for c in children}
    assert status == {"norm=layernorm/seed0": "FAILED", "norm=rmsnorm/seed0": "FINISHED"}
    failed = next(c for c in children if c.info.status == "FAILED")
    assert failed.data.tags["failure_reason"] == "RuntimeError: boom"
    assert parent.info.status == "FAILED"


def test_sigterm_ends_runs_killed_and_resume_finishes_them(
    write_spec, mlflow_uri, monkeypatch, capsys
):
    original = Trainer._train_step
    calls = []

    def train_step(self, *args, **kwargs):
        calls.append(self.step)
        if len(calls) == 8:  # after the checkpoint at step 6
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_train_step", train_step)
    path = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]})
    assert main(["run", str(path)]) == 128 + signal.SIGTERM
    client, (parent,), (child,) = runs_of(mlflow_uri, "tiny")  # the second variant never started
    assert parent.info.status == "KILLED" and child.info.status == "KILLED"
    assert child.data.tags["failure_reason"] == "terminated by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored

    calls.clear()
    monkeypatch.setattr(Trainer, "_train_step", original)
    capsys.readouterr()
    assert main(["run", str(path), "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"{child.info.run_name}: resumed at step 6 from " in out
    assert out.split(": resumed at step 6 from ")[1].split()[0].endswith("last.pt")
    _, (parent2,), children = runs_of(mlflow_uri, "tiny")
    assert parent2.info.run_id == parent.info.run_id and parent2.info.status == "FINISHED"
    assert "failure_reason" not in parent2.data.tags
    assert {c.info.status for c in children} == {"FINISHED"}
    resumed = next(c for c in children if c.info.run_id == child.info.run_id)
    assert "failure_reason" not in resumed.data.tags
    history = client.get_metric_history(child.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == [3, 6, 9, 12]  # no duplicate, none missing


def test_resume_with_both_checkpoints_damaged_is_one_line_and_exit_2(
    write_spec, mlflow_uri, monkeypatch, capsys, tmp_path
):
    original = Trainer._train_step
    calls = []

    def train_step(self, *args, **kwargs):
        calls.append(self.step)
        if len(calls) == 10:  # after the checkpoint at step 6, and so a previous one kept
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_train_step", train_step)
    path = write_spec(train={"checkpoint_every": 3})
    assert main(["run", str(path)]) == 128 + signal.SIGTERM
    monkeypatch.setattr(Trainer, "_train_step", original)
    files = sorted((tmp_path / "checkpoints").rglob("*.pt"))
    assert len(files) == 2  # last.pt and the previous one
    for file in files:  # cut short, as a full disk leaves them
        with file.open("r+b") as f:
            f.truncate(file.stat().st_size // 2)
    capsys.readouterr()
    assert main(["run", str(path), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("error: base/seed0: ") and "run again with --resume" in err
    _, (parent,), _ = runs_of(mlflow_uri, "tiny")
    assert parent.info.status == "FAILED"


def test_resume_skips_finished_runs_and_starts_missing_ones(write_spec, mlflow_uri, capsys):
    path = write_spec(seeds=[0])
    assert main(["run", str(path)]) == 0
    _, (parent,), (first,) = runs_of(mlflow_uri, "tiny")
    assert main(["run", str(path), "--resume", "-o", "seeds=[0, 1]"]) == 0
    assert "base/seed0: already FINISHED, skipped" in capsys.readouterr().out
    client, (parent2,), children = runs_of(mlflow_uri, "tiny")
    assert parent2.info.run_id == parent.info.run_id
    assert {c.info.run_name: c.info.status for c in children} == {
        "base/seed0": "FINISHED",
        "base/seed1": "FINISHED",
    }
    assert steps_of(client, first.info.run_id, "train/loss") == [3, 6, 9, 12]


def test_resume_without_an_earlier_run_starts_a_new_one(write_spec, mlflow_uri):
    assert main(["run", str(write_spec()), "--resume"]) == 0
    _, (parent,), (child,) = runs_of(mlflow_uri, "tiny")
    assert parent.info.status == child.info.status == "FINISHED"


def test_variant_trains_the_named_variants_alone(write_spec, mlflow_uri, capsys):
    path = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]})
    assert main(["run", str(path), "--variant", "norm=layernorm"]) == 0
    _, _, children = runs_of(mlflow_uri, "tiny")
    assert [c.info.run_name for c in children] == ["norm=layernorm/seed0"]
    capsys.readouterr()
    assert main(["run", str(path), "--variant", "norm=layrnorm", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --variant: no variant 'norm=layrnorm'")
    assert "norm=layernorm" in err


READ_ONLY = object()
"""In `BAD_INPUT`'s files: a directory this process cannot write in (root writes anywhere)."""
AS_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only directories")

# (spec tree, override args, files to make first, start of the one-line error). Paths are
# relative to the working directory, where the spec's default outputs (results/...) go; a file's
# value is its text, or READ_ONLY for a directory without write permission.
BAD_INPUT = [
    ({"train": {"optimizer": {"lr": -1}}}, [], {}, "train.optimizer.lr: must be > 0"),
    ({"train": {"stpes": 5}}, [], {}, "train.stpes: unknown key"),
    ({"data": {"corpus": "no/such/corpus.txt"}}, [], {}, "data.corpus: corpus file not found"),
    ({"model": {"norm": "batchnorm"}}, [], {}, "model.norm"),
    ({"ablate": {"model.mlp": ["relu", "swishglu"]}}, [], {}, "ablate.model.mlp[1]"),
    ({}, ["-o", "train.steps=0"], {}, "train.steps: must be > 0"),
    ({}, ["-o", "train.batch_size=[1"], {}, "train.batch_size: cannot parse override value"),
    ({}, ["-o", "model.dimm=64"], {}, "model.dimm"),
    ({}, ["-o", "train.steps"], {}, "train.steps: an override must look like KEY=VALUE"),
    (
        {"data": {"tokenizer": {"path": "tok.json"}}},
        [],
        {"tok.json": '{"model": {"type": "nope"}}'},
        "data.tokenizer.path: tok.json is not a tokenizer.json: ",
    ),
    (
        {"tracking": {"uri": "foo://bar"}},
        [],
        {},
        "tracking.uri: MLflow has no tracking store for 'foo://bar'; use a path or a ",
    ),
    ({}, [], {"results": ""}, "data.cache_dir: cannot create results/cache: results is not a dir"),
    (
        {"data": {"cache_dir": "cache"}},
        [],
        {"cache": ""},
        "data.cache_dir: cache is not a directory",
    ),
    (
        {"train": {"checkpoint_dir": "ckpt"}},
        [],
        {"ckpt": ""},
        "train.checkpoint_dir: ckpt is not a directory",
    ),
    (
        {"tracking": {"uri": "sqlite:///db/mlflow.db"}},
        [],
        {"db": ""},
        "tracking.uri: the database db/mlflow.db: db is not a directory",
    ),
    (
        {"tracking": {"uri": "sqlite:///mlflow.db"}},
        [],
        {"mlflow.db/runs": ""},
        "tracking.uri: the database mlflow.db is a directory",
    ),
    pytest.param(
        {},
        [],
        {"results": READ_ONLY},
        "data.cache_dir: cannot create results/cache: results is not writable",
        marks=AS_ROOT,
    ),
    pytest.param(
        {"tracking": {"uri": "sqlite:///db/mlflow.db"}},
        [],
        {"db": READ_ONLY},
        "tracking.uri: the database db/mlflow.db: db is not writable",
        marks=AS_ROOT,
    ),
]


@pytest.mark.parametrize(("tree", "args", "files", "message"), BAD_INPUT)
def test_bad_input_exits_2_naming_its_field_and_writes_nothing(
    tmp_path, monkeypatch, capfd, tree, args, files, message
):
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    path = spec_dir / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", **tree}))
    work = tmp_path / "work"
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        if text is READ_ONLY:
            (work / name).mkdir(mode=0o555)
        else:
            (work / name).write_text(text)
    work.mkdir(exist_ok=True)
    before = sorted(work.rglob("*"))
    monkeypatch.chdir(work)  # the spec's default paths (results/...) are relative to here
    assert main(["run", str(path), *args]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {message}"), err
    assert sorted(work.rglob("*")) == before and list(spec_dir.iterdir()) == [path]


NOTHING, LOCK = "nothing", "the token cache's lock file alone"
JSONL = '{"text": "one document"}\n'

# (files to make, data section, start of the one-line error, what the run leaves; {dir} is the
# files' directory, where the spec's relative corpus path points): corpora bad in their content.
# Opening one leaves nothing (the start of `datasets`' copy of a json or parquet file removed).
# What only tokenizing reveals, under the token cache's lock, leaves that lock's file alone: the
# tokenizer and token entry the preparation wrote are removed.
BAD_CORPORA = [
    ({"c.txt": b""}, {}, "data.corpus: {dir}/c.txt is too small to hold out", NOTHING),
    ({"c.jsonl": b""}, {}, "data.corpus: {dir}/c.jsonl is empty", NOTHING),
    ({"c.txt": b"abc\xff\xfe" * 20}, {}, "data.corpus: {dir}/c.txt is not valid UTF-8", NOTHING),
    (
        {"c.txt.gz": b"not gzip" * 20},
        {},
        "data.corpus: cannot read {dir}/c.txt.gz: BadGzipFile",
        NOTHING,
    ),
    (
        {"c.jsonl": b"\xff\xfe" + JSONL.encode()},
        {},
        "data.corpus: cannot load {dir}/c.jsonl: ArrowInvalid: JSON parse error",
        NOTHING,
    ),
    (
        {"c.jsonl": (JSONL + '{"body": "no text"}\n').encode()},
        {},
        "data.corpus: {dir}/c.jsonl: 1 document(s) lack 'text'",
        NOTHING,
    ),
    (
        {"c.parquet": b"PAR1 not parquet"},
        {},
        "data.corpus: cannot read {dir}/c.parquet: not a parquet file",
        NOTHING,
    ),
    (
        {"c.txt": b"To be, or not to be, that is the question. " * 5},
        {},
        "train.seq_len: must be <= the ",
        LOCK,
    ),
    (
        {"c.jsonl": JSONL.encode()},
        {},
        "data.corpus: {dir}/c.jsonl leaves no training documents",
        LOCK,
    ),
    (
        {"c.jsonl": (JSONL * 3).encode()},
        {"val_seed": 1},  # the seed with which none of three documents is held out
        "data.val_fraction: holds out no document of {dir}/c.jsonl: raise it",
        LOCK,
    ),
]


def test_a_full_disk_while_tokenizing_is_one_line_naming_the_cache(
    write_spec, tmp_path, monkeypatch, capfd
):
    import errno

    import minimind.data.tokens

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(minimind.data.tokens, "atomic_open", full)
    cache = tmp_path / "fresh-cache"
    path = write_spec(data={"cache_dir": str(cache), "num_proc": 1})
    assert main(["run", str(path)]) == 2
    printed = capfd.readouterr().err  # the tokenizer's progress lines, then the error
    err = [line for line in printed.splitlines() if line.startswith("error")]
    assert len(err) == 1 and "Traceback" not in printed and printed.rstrip().endswith(err[0])
    assert err[0].startswith("error: data.cache_dir: no space left on the device to prepare ")
    assert not list(cache.rglob("manifest.json"))  # nothing that reads as prepared


@pytest.mark.parametrize(("files", "data", "message", "leaves"), BAD_CORPORA)
def test_a_bad_corpus_exits_2_naming_its_field(
    tmp_path, monkeypatch, capfd, files, data, message, leaves
):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({"name": "bad", "data": {"corpus": next(iter(files)), **data}}))
    before = set(tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(spec)]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: " + message.format(dir=tmp_path)), err
    written = {p.relative_to(tmp_path) for p in set(tmp_path.rglob("*")) - before if p.is_file()}
    if leaves == LOCK:  # after the progress lines of the work it did
        (lock,) = written
        assert lock.parent == Path("results/cache/locks"), written
        return
    assert len(err) == 1, err
    assert not written, written


def test_a_missing_spec_file_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "missing.yaml"]) == 2
    assert "missing.yaml: file not found" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", shipped_specs("*.yaml"), ids=lambda p: p.name)
def test_dry_run_of_every_shipped_spec_writes_nothing(spec, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    loaded = load_spec(spec)
    for variant in expand(loaded):
        assert variant.name in out
        assert f"{variant.spec.model_config_obj().num_params():,}" in out
    assert f"= {len(expand(loaded)) * len(loaded.seeds)} run(s)" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", NEEDS_ASSEMBLED_CORPUS)
def test_dry_run_of_the_shipped_specs_on_the_assembled_corpus(name, assembled_corpus, capsys):
    spec = EXPERIMENTS / name
    before = sorted(assembled_corpus.rglob("*"))
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    loaded = load_spec(spec)
    for variant in expand(loaded):
        assert variant.name in out
    assert f"= {len(expand(loaded)) * len(loaded.seeds)} run(s)" in out
    assert sorted(assembled_corpus.rglob("*")) == before


def test_dry_run_reports_tokens_per_run(write_spec, tmp_path, capsys):
    path = write_spec(train={"steps": 12, "tokens": 1000})  # ceil(1000 / 128) = 8 steps
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert main(["run", str(path), "--dry-run"]) == 0
    assert f"{8 * 128:,}" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_dry_run_states_the_seeds_a_power_hint_needs(write_spec, capsys):
    from minimind.stats.power import seeds_for_difference

    ablate = {"model.norm": ["layernorm", "rmsnorm"], "model.mlp": ["swiglu", "relu"]}
    path = write_spec(power={"delta": 0.01, "sd": 0.004}, ablate=ablate, seeds=[0, 1, 2])
    assert main(["run", str(path), "--dry-run"]) == 0
    # 4 cells: 3 comparisons with the first
    needed = seeds_for_difference(0.01, 0.004, design="unpaired", comparisons=3)
    out = capsys.readouterr().out
    assert f"takes {needed} seeds per arm unpaired" in out and "the spec runs 3: too few" in out
    path = write_spec(power={"delta": 0.01, "sd": 0.0, "correction": "holm"})
    assert main(["run", str(path), "--dry-run"]) == 2
    assert "power.sd" in capsys.readouterr().err


def test_readme_short_run_dry_run_derives_the_warmup(tmp_path, monkeypatch, capsys):
    # The README's example: 50 steps under base.yaml, which sets no warm-up of its own.
    monkeypatch.chdir(tmp_path)
    spec = str(REPO / "experiments" / "norm.yaml")
    assert main(["run", spec, "-o", "train.steps=50", "-o", "model.dim=64", "--dry-run"]) == 0
    assert "5 (auto)" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_dry_run_shows_the_precision_auto_resolves_to_on_this_machine(
    write_spec, monkeypatch, capsys
):
    monkeypatch.setattr("minimind.training.device.cpu_has_native_bf16", lambda: True)
    path = str(write_spec(train={"device": "cpu"}))  # 32 wide: below CPU_BF16_MIN_DIM
    wide = f"model.dim={CPU_BF16_MIN_DIM}"
    for overrides, shown in (
        ([], " fp32 (auto)"),
        (["-o", wide], " bf16 (auto)"),
        (["-o", wide, "-o", "train.precision=fp32"], " fp32"),
    ):
        assert main(["run", path, "--dry-run", *overrides]) == 0
        row = capsys.readouterr().out.splitlines()[3]  # the summary, the header, a rule, the row
        assert row.endswith(shown), row


def test_resume_after_sigkill_matches_an_uninterrupted_run(write_spec, mlflow_uri, tmp_path):
    """`python -m minimind run` is killed with SIGKILL at a random step after its first checkpoint;
    `--resume` must end with the weights and metrics of an uninterrupted run, in the same runs."""
    steps = 200
    changes = {"train": {"steps": steps, "log_every": 10, "eval_every": 50, "checkpoint_every": 25}}
    path = write_spec(**changes)
    run_dir = Path("checkpoints", "{experiment}", spec_hash(load_spec(path)), "base", "seed0")
    run_checkpoints = tmp_path / str(run_dir).format(experiment="tiny")
    process = subprocess.Popen(
        [sys.executable, "-m", "minimind", "run", str(path)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(run_checkpoints.glob("*/last.pt")):
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.02)
        time.sleep(random.uniform(0.0, 0.2))
        assert process.poll() is None, "the run finished before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        process.stderr.close()
    (ckpt,) = run_checkpoints.glob("*/last.pt")  # under the run's id
    killed_at = torch.load(ckpt, weights_only=True)["step"]
    assert 25 <= killed_at < steps
    client, (parent,), (child,) = runs_of(mlflow_uri, "tiny")
    assert child.info.status == "RUNNING"  # no handler could run

    assert main(["run", str(path), "--resume"]) == 0
    resumed = torch.load(ckpt, weights_only=True)

    # The same spec under another experiment name: its own runs and checkpoint directory.
    tree = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**tree, "name": "reference"}))
    assert main(["run", str(path)]) == 0
    (reference_ckpt,) = (tmp_path / str(run_dir).format(experiment="reference")).glob("*/last.pt")
    reference = torch.load(reference_ckpt, weights_only=True)
    assert resumed["step"] == reference["step"] == steps
    for key, tensor in reference["model"].items():
        assert torch.equal(resumed["model"][key], tensor), key

    _, parents, children = runs_of(mlflow_uri, "tiny")
    assert [p.info.run_id for p in parents] == [parent.info.run_id]
    assert [c.info.run_id for c in children] == [child.info.run_id]
    assert parents[0].info.status == children[0].info.status == "FINISHED"
    _, _, (reference_child,) = runs_of(mlflow_uri, "reference")
    for key in ("train/loss", "val/loss", "opt/lr", "opt/grad_norm", "train/tokens"):
        history = client.get_metric_history(child.info.run_id, key)
        expected = client.get_metric_history(reference_child.info.run_id, key)
        assert sorted((m.step, m.value) for m in history) == sorted(
            (m.step, m.value) for m in expected
        ), key
    assert steps_of(client, child.info.run_id, "train/loss") == list(range(10, steps + 1, 10))


def test_a_corpus_too_short_for_the_context_exits_2_before_mlflow(
    write_spec, tmp_path, small_corpus, capsys
):
    tiny = tmp_path / "tiny.txt"
    tiny.write_bytes(small_corpus.read_bytes()[:2000])
    path = write_spec(
        data={"corpus": str(tiny)}, model={"max_seq_len": 256}, train={"seq_len": 256}
    )
    assert main(["run", str(path)]) == 2
    assert "train.seq_len: must be <= the" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "checkpoints").exists()


def _running_children(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny")
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")
    return [run for run in runs if run.info.status == "RUNNING"]


@pytest.mark.slow
def test_a_new_invocation_closes_the_runs_of_a_sigkilled_one_as_killed(write_spec, mlflow_uri):
    """SIGKILL leaves an invocation's runs RUNNING; a plain `minimind run` of the same spec
    (no --resume) finds its process gone and ends them KILLED."""
    path = write_spec(train={"steps": 300, "checkpoint_every": 100})
    process = subprocess.Popen(
        [sys.executable, "-m", "minimind", "run", str(path)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not _running_children(mlflow_uri):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no child run within 300 s"
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    (killed,) = _running_children(mlflow_uri)

    assert main(["run", str(path)]) == 0
    client, parents, children = runs_of(mlflow_uri, "tiny")
    assert sorted(run.info.status for run in parents) == ["FINISHED", "KILLED"]
    assert sorted(run.info.status for run in children) == ["FINISHED", "KILLED"]
    closed = client.get_run(killed.info.run_id)
    assert closed.info.status == "KILLED"
    assert "process died" in closed.data.tags["failure_reason"]


@pytest.mark.parametrize("command", [["run"], ["sweep"], ["data", "prepare"]])
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train: {stpes: 5}", "error: train.stpes: unknown key"),
        ("model: {mlp: {name: moe, top_k: 9}}", "error: model.mlp: mlp 'moe': top_k (9) must be"),
    ],
)
def test_a_spec_error_exits_2_without_importing_torch(tmp_path, command, text, message):
    # A bad spec is answered at once: validating one needs the registry's names and options,
    # never torch, which alone takes seconds to import.
    spec = tmp_path / "bad.yaml"
    spec.write_text(f"name: x\n{text}\n")
    code = (
        "import sys\n"
        "from minimind.cli import main\n"
        f"assert main([*{command!r}, {str(spec)!r}]) == 2\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.slow
def test_an_unreachable_tracking_server_at_start_exits_2_at_once(write_spec):
    """A server that does not answer when the run starts is a wrong or stopped tracking.uri:
    one line naming it and exit 2, not minutes of retries and a traceback."""
    path = write_spec()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "minimind",
            "run",
            str(path),
            "-o",
            "tracking.uri=http://127.0.0.1:1",
        ],
        env={**os.environ, "MINIMIND_TRACKING_OUTAGE_S": "120"},
        capture_output=True,
        text=True,
        timeout=110,  # below the outage limit: the old code retried for all of it
    )
    assert result.returncode == 2, result.stderr
    # Found before anything is tokenized (the store is asked once, with no retries).
    assert "error: tracking.uri: http://127.0.0.1:1 does not answer" in result.stderr
    assert "Traceback" not in result.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_store_that_does_not_answer_is_reported_before_tokenizing(
    write_spec, tmp_path, capsys
):
    """A stopped MLflow server or database: one line, exit 2, and the corpus left untokenized
    (no cache written); a database password never printed."""
    cache = tmp_path / "fresh-cache"
    for uri in (
        f"http://127.0.0.1:{_closed_port()}",
        f"postgresql://u:hunter2@127.0.0.1:{_closed_port()}/db",
    ):
        path = write_spec(tracking={"uri": uri}, data={"cache_dir": str(cache)})
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: tracking.uri: ") and err.count("\n") == 1, err
        assert "does not answer" in err and "hunter2" not in err
    assert not cache.exists()


def test_a_sqlite_tracking_uri_at_a_text_file_is_refused_and_no_lock_is_left_beside_it(
    write_spec, tmp_path, capsys
):
    notes = tmp_path / "notes" / "mine.txt"
    notes.parent.mkdir()
    notes.write_text("my notes\n")
    path = write_spec(tracking={"uri": f"sqlite:///{notes}"})
    for argv in (["run", str(path), "--dry-run"], ["run", str(path)]):
        assert main(argv) == 2
        assert (
            capsys.readouterr().err == f"error: tracking.uri: {notes} is not an SQLite database\n"
        )
    assert [p.name for p in notes.parent.iterdir()] == ["mine.txt"]
    assert notes.read_text() == "my notes\n"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("model.vocab_size=1000000000000", "model.vocab_size"),
        ("train.batch_size=100000000", "train.batch_size"),
    ],
)
def test_sizes_that_cannot_fit_are_refused_with_a_memory_estimate(
    write_spec, capsys, override, field
):
    assert main(["run", str(write_spec()), "-o", override, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and "cannot fit: it needs about " in err
    assert "GiB" in err and err.count("\n") == 1


def test_the_dry_run_warns_of_a_batch_beyond_the_memory_with_its_estimate(
    write_spec, capsys, monkeypatch
):
    import minimind.run.plan as plan_module

    path = write_spec()
    (variant, *_) = plan_module.plan_run(load_spec(path)).variants
    need = plan_module.memory_estimate(variant).total
    assert plan_module.memory_estimate(variant).activations > 0
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "warning:" not in capsys.readouterr().out
    monkeypatch.setattr(plan_module, "device_memory_bytes", lambda device: need // 2)
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {variant.name} needs about " in out and "activations and logits" in out


def test_a_tokenizer_larger_than_the_vocabulary_is_refused_before_tokenizing(
    write_spec, tmp_path, small_corpus, capsys
):
    from minimind.data.sources import read_text_corpus
    from minimind.data.tokenizer import train_bpe

    tokenizer = tmp_path / "tokenizer.json"
    train_bpe([read_text_corpus("tinyshakespeare").decode()[:200_000]], 512).save(str(tokenizer))
    cache = tmp_path / "fresh-cache"
    path = write_spec(
        model={"vocab_size": 300},
        data={"tokenizer": {"path": str(tokenizer)}, "cache_dir": str(cache)},
    )
    for argv in (["run", str(path), "--dry-run"], ["run", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == "error: model.vocab_size: must be >= the tokenizer's 512 tokens, got 300\n"
    assert not cache.exists()
