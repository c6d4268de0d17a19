"""`minimind data prepare` and `minimind run` on sharded and hub-named corpora."""

import pandas as pd
import pytest
import torch

from minimind.cli import main
from minimind.data import prepare_data
from minimind.spec import load_spec
from tests.test_run import runs_of

TEXTS = [
    f"Story {i}: the little fox found {i % 13} shiny stones by the river.\n" for i in range(600)
]


def parquet_dir(directory, texts=TEXTS, n_files: int = 3, prefix: str = "part"):
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(n_files):
        frame = pd.DataFrame({"text": texts[k::n_files]})
        frame.to_parquet(directory / f"{prefix}-{k:05d}.parquet")
    return directory


def test_prepare_prints_the_manifest_and_run_reuses_it(write_spec, tmp_path, capsys, monkeypatch):
    corpus = parquet_dir(tmp_path / "shards")
    path = write_spec(data={"corpus": str(corpus), "cache_dir": str(tmp_path / "cache")})
    assert main(["data", "prepare", str(path)]) == 0
    out = capsys.readouterr().out
    data = prepare_data(load_spec(path).data)
    assert data.manifest_hash in out and str(corpus) in out

    import minimind.data.prepare as prepare_module

    def fail(*args):
        raise AssertionError("run should read the prepared shards")

    monkeypatch.setattr(prepare_module, "tokenize_piece", fail)
    monkeypatch.setattr(prepare_module, "train_bpe", fail)
    assert main(["run", str(path)]) == 0


@pytest.mark.parametrize("corpus", ["hub", "glob"])
def test_run_trains_on_an_hf_name_and_on_a_glob_and_tags_the_manifest(
    write_spec, tmp_path, mlflow_uri, corpus
):
    # `hf:<folder>` takes the hub code path (datasets.load_dataset(<name>)) on local files.
    hub = tmp_path / "hub"
    parquet_dir(hub, TEXTS[:500], prefix="train")
    parquet_dir(hub, TEXTS[500:], n_files=1, prefix="validation")
    name = f"hf:{hub}" if corpus == "hub" else str(hub / "train-*.parquet")
    path = write_spec(data={"corpus": name, "cache_dir": str(tmp_path / "cache")})
    assert main(["run", str(path)]) == 0
    _, _, children = runs_of(mlflow_uri, "tiny")
    data = prepare_data(load_spec(path).data)
    assert {c.data.tags["data_manifest"] for c in children} == {data.manifest_hash}
    if corpus == "hub":  # the corpus's own validation split
        assert data.val_bytes == sum(len(t) for t in TEXTS[500:])


def test_bad_corpora_exit_2_with_one_line(write_spec, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.txt").write_bytes(b"\xff\xfe not text")
    pd.DataFrame({"body": ["a", "b"]}).to_parquet(tmp_path / "c.parquet")
    cases = {
        str(tmp_path / "empty"): "error: data.corpus: ",
        str(bad): "error: data.corpus: cannot load",
        str(tmp_path / "c.parquet"): "error: data.text_field: ",
    }
    for corpus, start in cases.items():
        path = write_spec(data={"corpus": corpus, "cache_dir": str(tmp_path / "cache")})
        for command in (["data", "prepare"], ["run"]):
            assert main([*command, str(path)]) == 2
            err = capsys.readouterr().err
            assert err.startswith(start) and err.count("\n") == 1, (corpus, err)
    assert not list((tmp_path / "cache").rglob("manifest.json"))


def test_run_with_document_masks_and_bos_aligned_windows(write_spec, tmp_path, monkeypatch):
    import minimind.training.evaluation as evaluation_module

    corpus = parquet_dir(tmp_path / "shards")
    data = {"corpus": str(corpus), "cache_dir": str(tmp_path / "cache"), "doc_mask": True}
    path = write_spec(data={**data, "bos_align": True})
    seen = []
    real = evaluation_module.document_ids

    def training_document_ids(x, eos):
        if torch.is_grad_enabled():  # a training batch, not an evaluation window
            seen.append(x)
        return real(x, eos)

    monkeypatch.setattr(evaluation_module, "document_ids", training_document_ids)
    assert main(["run", str(path)]) == 0
    prepared = prepare_data(load_spec(path).data)
    starts = set(prepared.train_tokens.doc_starts().tolist())
    first_tokens = {int(prepared.train_tokens[s]) for s in starts}
    assert seen and all(set(x[:, 0].tolist()) <= first_tokens for x in seen)


def test_corpus_directory_and_glob_resolve_next_to_the_spec(tmp_path, monkeypatch):
    parquet_dir(tmp_path / "specs" / "shards")
    spec = tmp_path / "specs" / "s.yaml"
    monkeypatch.chdir(tmp_path)  # elsewhere than the spec
    for corpus in ("shards", "shards/*.parquet"):
        spec.write_text(f"name: s\ndata: {{corpus: '{corpus}'}}\n")
        assert load_spec(spec).data.corpus == str(tmp_path / "specs" / corpus)
