"""`minimind export`: every combination of the registry reloads in transformers, in a fresh
process with the hub offline and without the harness importable, with the harness's logits (within
1e-5) and greedy generations; tied heads stay tied; runs and checkpoints export from the CLI; a bad
source is one line and exit 2."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")

from tokenizers import Tokenizer, models  # noqa: E402

import registry  # noqa: E402
from minimind import MiniMindLM, ModelConfig  # noqa: E402
from minimind.cli import main  # noqa: E402
from minimind.data.tokenizer import special_ids, with_specials  # noqa: E402
from minimind.hf.convert import architecture, check_exportable  # noqa: E402
from minimind.hf.export import export_model  # noqa: E402
from minimind.model.generation import GREEDY  # noqa: E402
from tests.model.test_model_combinations import ALL_CASES, CASE_IDS, VOCAB, build  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# Loads every export listed in argv[1] as a user would, where the harness is not installed.
RELOAD = """
import json, sys
sys.modules["minimind"] = None  # the export must not need the harness
sys.modules["registry"] = None
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
cases = json.load(open(sys.argv[1]))
results = {}
for case in cases:
    model = AutoModelForCausalLM.from_pretrained(case["dir"], trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(case["dir"], trust_remote_code=True)
    with torch.no_grad():
        logits = model(torch.tensor(case["ids"])).logits
        generated = model.generate(torch.tensor(case["prompt"]), max_new_tokens=case["new"])
    results[case["dir"]] = {
        "logits": logits,
        "generated": generated,
        "class": type(model).__name__,
        "tied": model.lm_head.weight is model.get_input_embeddings().weight,
        "specials": [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id],
    }
torch.save(results, sys.argv[2])
"""


def word_tokenizer(size: int = 40) -> Tokenizer:
    """A tokenizer small enough for the matrix's 61-token models: `size` words plus the specials."""
    vocab = {f"w{i}": i for i in range(size)}
    return with_specials(Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0")))


def reload_in_fresh_process(cases: list[dict], tmp_path: Path) -> dict:
    manifest, results = tmp_path / "cases.json", tmp_path / "results.pt"
    manifest.write_text(json.dumps(cases))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),  # where remote code is copied to
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", RELOAD, str(manifest), str(results)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(results, weights_only=False)


def check_exports(models: dict[str, MiniMindLM], tokenizer: Tokenizer, tmp_path: Path) -> dict:
    """Export each model, reload them all in one fresh process, compare logits, greedy
    generations, tying and special tokens; returns each export's architecture."""
    generator = torch.Generator().manual_seed(0)
    ids = special_ids(tokenizer)
    expected, cases, arches = {}, [], {}
    for name, model in models.items():
        model.eval()
        out = tmp_path / name
        arches[name] = export_model(model, tokenizer, out)
        # words only: transformers reads a pad id in a prompt as padding
        tokens = torch.randint(0, ids.pad, (2, 10), generator=generator)
        prompt = torch.randint(0, ids.pad, (1, 5), generator=generator)
        new = model.config.max_seq_len - 5
        with torch.no_grad():
            logits = model(tokens).logits
            generated = model.generate(prompt, new, replace(GREEDY, eos_token_id=ids.eos))
        expected[str(out)] = (logits, generated, model.config.tie_embeddings)
        cases.append(
            {"dir": str(out), "ids": tokens.tolist(), "prompt": prompt.tolist(), "new": new}
        )
    results = reload_in_fresh_process(cases, tmp_path)
    for directory, (logits, generated, tied) in expected.items():
        got = results[directory]
        torch.testing.assert_close(got["logits"], logits, rtol=0, atol=1e-5, msg=directory)
        assert got["generated"].tolist() == generated.tolist(), directory
        assert got["tied"] == tied, directory
        assert got["specials"] == [ids.bos, ids.eos, ids.pad], directory
    return arches


def perturbed(model: MiniMindLM) -> MiniMindLM:
    """Noise on every weight, so that norms, biases and zero-initialised projections matter."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def representative_cases() -> list[int]:
    """Indices into ALL_CASES that meet every component and every option at least once."""
    seen: set[tuple[str, str]] = set()
    chosen = []
    for i, (option, combination) in enumerate(ALL_CASES):
        keys = {(slot, value) for slot, value in enumerate(combination)} | {("option", option)}
        if not keys <= seen:
            seen |= keys
            chosen.append(i)
    return chosen


MIXTRAL = {"name": "moe", "n_experts": 4, "top_k": 2, "n_shared": 0, "hidden": 32}


def reference_models() -> dict[str, MiniMindLM]:
    models = {}
    for tied in (True, False):
        for name, mlp in (("llama", "swiglu"), ("mixtral", MIXTRAL)):
            torch.manual_seed(0)
            config = ModelConfig(
                vocab_size=VOCAB,
                dim=32,
                n_layers=2,
                n_heads=4,
                n_kv_heads=2,
                max_seq_len=16,
                mlp=mlp,
                tie_embeddings=tied,
                attention={"name": "gqa", "bias": name == "llama"},
            )
            models[f"{name}-{'tied' if tied else 'untied'}"] = perturbed(MiniMindLM(config))
    # loss-free balancing: the trained per-expert bias shifts which experts are chosen
    config = config.replace(mlp={**MIXTRAL, "n_experts": 8, "balance": "bias"})
    biased = perturbed(MiniMindLM(config))
    for layer in biased.layers:
        layer.mlp.expert_bias.copy_(torch.randn(8) * 0.2)
    models["moe-bias-balanced"] = biased
    return models


def test_every_component_and_llama_and_mixtral_reload_with_the_same_logits(tmp_path):
    models = reference_models()
    for i in representative_cases():
        models[CASE_IDS[i].replace(":", "_")] = perturbed(build(ALL_CASES[i][1], ALL_CASES[i][0]))
    arches = check_exports(models, word_tokenizer(), tmp_path)
    assert arches["llama-tied"] == arches["llama-untied"] == "llama"
    assert arches["mixtral-tied"] == arches["mixtral-untied"] == "mixtral"
    assert arches["moe-bias-balanced"] == "minimind"
    assert "minimind" in arches.values()


@pytest.mark.slow
def test_the_whole_combination_matrix_reloads_with_the_same_logits(tmp_path):
    models = {
        CASE_IDS[i].replace(":", "_"): perturbed(build(combination, option))
        for i, (option, combination) in enumerate(ALL_CASES)
    }
    check_exports(models, word_tokenizer(), tmp_path)


@pytest.mark.parametrize(
    "change, arch",
    [
        ({}, "llama"),
        ({"mlp": MIXTRAL}, "mixtral"),
        ({"mlp": {**MIXTRAL, "n_shared": 1}}, "minimind"),  # Mixtral has no shared experts
        ({"mlp": {**MIXTRAL, "top_k": 1}}, "minimind"),  # Mixtral renormalises a single weight
        ({"mlp": {**MIXTRAL, "balance": "bias"}}, "minimind"),  # the bias changes the choice
        ({"position": {"name": "rope", "fraction": 0.5}}, "minimind"),
        ({"attention": {"name": "gqa", "qk_norm": "rmsnorm"}}, "minimind"),
        ({"logit_softcap": 30.0}, "minimind"),
        ({"norm": "layernorm"}, "minimind"),
    ],
)
def test_the_architecture_is_exact_or_the_model_code_goes_along(change, arch):
    assert architecture(ModelConfig.preset("tiny", **change)) == arch


PLUGIN_NORM = """
from dataclasses import dataclass
import torch
import registry

@registry.register("norm", "export-scalenorm")
class ScaleNorm(torch.nn.Module):
    def __init__(self, *, dim):
        super().__init__()
        self.g = torch.nn.Parameter(torch.tensor(float(dim) ** 0.5))

    def forward(self, x):
        return self.g * x / x.norm(dim=-1, keepdim=True)
"""


def test_a_plugin_component_is_an_error_naming_it(tmp_path, monkeypatch):
    snapshot = {slot: dict(names) for slot, names in registry.core._names.items()}
    monkeypatch.setattr(registry.core, "_names", snapshot)
    (tmp_path / "export_norm_plugin.py").write_text(PLUGIN_NORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "export_norm_plugin", raising=False)
    registry.load_plugins(["export_norm_plugin"])
    config = ModelConfig(vocab_size=VOCAB, dim=32, n_layers=1, norm="export-scalenorm")
    with pytest.raises(ValueError, match="model.norm: component 'export-scalenorm' has no"):
        check_exportable(config)
    with pytest.raises(ValueError, match="model.norm"):
        export_model(MiniMindLM(config), word_tokenizer(), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    monkeypatch.delitem(sys.modules, "export_norm_plugin")


@pytest.mark.slow  # trains four runs
def test_runs_and_checkpoints_export_from_the_command_line_moe_included(
    write_spec, mlflow_uri, tmp_path, capsys
):
    spec = write_spec(
        ablate={"model.block": ["prenorm", "postnorm"], "model.mlp": ["swiglu", "moe"]}
    )
    assert main(["run", str(spec)]) == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "tiny"]
    runs = client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")
    by_variant = {run.data.tags["variant"]: run.info.run_id for run in runs}
    capsys.readouterr()

    for variant, arch in (("mlp=swiglu", "llama"), ("mlp=moe", "mixtral")):
        (run_id,) = [r for v, r in by_variant.items() if v == f"block=prenorm,{variant}"]
        out = tmp_path / arch
        assert main(["export", run_id, str(out), "--tracking-uri", mlflow_uri]) == 0
        assert f"as {arch} to" in capsys.readouterr().out
    checkpoint = next((tmp_path / "checkpoints").rglob("block=postnorm,mlp=moe/seed0/*/last.pt"))
    out = tmp_path / "remote"
    assert main(["export", str(checkpoint), str(out), "--tracking-uri", mlflow_uri]) == 0
    assert "as minimind" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["auto_map"]
    assert (out / "modeling_minimind.py").is_file() and (out / "model.safetensors").is_file()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from minimind.hf.source import load_source
    from minimind.training.checkpoint import load_checkpoint

    trained = load_source(str(checkpoint), mlflow_uri)
    ours = MiniMindLM(trained.config).eval()
    ours.load_state_dict(load_checkpoint(checkpoint)["model"])
    theirs = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    text = "Once upon a time there was"
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == trained.tokenizer.encode(text).ids  # the run's tokenizer
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, ours(ids).logits, rtol=0, atol=1e-5)


def test_a_run_exports_by_id_and_never_with_another_runs_checkpoint(
    write_spec, mlflow_uri, tmp_path, capsys
):
    """A run as the harness tags it today (`record.child_tags`) exports by its id, from its own
    checkpoint file only: one stamped by another run is refused."""
    assert main(["run", str(write_spec())]) == 0
    from minimind.tracking.backend import connect
    from minimind.training.checkpoint import OWNER_KEY, load_checkpoint, save_checkpoint

    (run,) = connect(mlflow_uri).search_runs(
        [connect(mlflow_uri).get_experiment_by_name("tiny").experiment_id],
        "tags.`minimind.role` = 'child'",
    )
    run_id = run.info.run_id
    capsys.readouterr()
    assert main(["export", run_id, str(tmp_path / "out"), "--tracking-uri", mlflow_uri]) == 0
    printed = capsys.readouterr()
    assert "as llama to" in printed.out and "Downloading artifacts" not in printed.err
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
    for file in (tmp_path / "out").iterdir():
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask, file

    (checkpoint,) = (tmp_path / "checkpoints").rglob(f"seed0/{run_id}/last.pt")
    state = load_checkpoint(checkpoint)
    save_checkpoint(checkpoint, {**state, OWNER_KEY: {**state[OWNER_KEY], "child": "f" * 32}})
    assert main(["export", run_id, str(tmp_path / "other"), "--tracking-uri", mlflow_uri]) == 2
    error = capsys.readouterr().err.splitlines()[-1]  # after MLflow's download progress bar
    assert error.startswith(f"error: run {run_id}: its checkpoint {checkpoint} belongs to another")
    assert not (tmp_path / "other").exists()


def test_a_run_without_the_tags_that_place_its_checkpoint_is_a_source_error():
    from minimind import record
    from minimind.hf.source import SourceError, _run_checkpoint

    tags = {record.ROLE_TAG: record.CHILD_ROLE, record.VARIANT_TAG: "base", record.SEED_TAG: "0"}
    run = SimpleNamespace(info=SimpleNamespace(run_id="r1"), data=SimpleNamespace(tags=tags))
    with pytest.raises(SourceError, match="run r1: its tags plan_hash, variant and seed do not"):
        _run_checkpoint(run, "checkpoints", "tiny")


def test_a_bad_source_or_out_dir_is_one_line_and_exit_2(tmp_path, mlflow_uri, capsys):
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    cases = [
        ([str(corrupt), str(tmp_path / "a")], "corrupt.pt: not a readable checkpoint"),
        ([str(foreign), str(tmp_path / "b")], "foreign.pt: not a minimind training checkpoint"),
        (
            ["0123456789abcdef0123456789abcdef", str(tmp_path / "c")],
            "no checkpoint file and no run",
        ),
        (["no/such/last.pt", str(tmp_path / "d")], "no checkpoint file and no run"),
    ]
    for argv, message in cases:
        assert main(["export", *argv, "--tracking-uri", mlflow_uri]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
        assert not Path(argv[1]).exists()
    missing = f"sqlite:///{tmp_path}/missing/dir/none.db"
    assert main(["export", "0" * 32, str(tmp_path / "e"), "--tracking-uri", missing]) == 2
    assert f"no MLflow store at {tmp_path}/missing/dir/none.db" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()  # no store made where none was
    model = MiniMindLM(ModelConfig(vocab_size=VOCAB, dim=32, n_layers=1))
    from minimind.hf.export import ExportError

    with pytest.raises(ExportError, match="out_dir: .* is not an empty directory"):
        export_model(model, word_tokenizer(), taken)
