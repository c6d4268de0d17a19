"""`minimind study` with `ladders:`: the manifest's checks, the section "At more than one scale"
giving `minimind compare`'s numbers for the same runs (or saying what the ladder lacks while it
trains), and each verdict's budget in tokens per parameter and epochs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fake_ladder import write_ladder
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main
from minimind.compare import load_runs, render
from minimind.compare.ladder import compare_ladder
from minimind.compare.ladder_render import ladder_section, result_rows
from minimind.data.prepare import manifest_hash

T0 = 1_600_000_000_000
STEPS, BATCH, SEQ, PARAMS = 10, 4, 8, 1000  # 320 training tokens: 0.32 per parameter
SPLIT_TOKENS = 160  # the training split: 320 tokens are 2 epochs of it
FINAL = {
    "base": np.array([2.50, 2.52, 2.54]),
    "good": np.array([2.40, 2.41, 2.42]),
    "plain": np.array([2.45, 2.47, 2.48]),
}


def _write_arms(uri: str, cache: Path) -> None:
    """Experiment `arms`: three variants × 3 seeds; `base` and `good` trained on a prepared
    corpus whose manifest is in `cache` (`data_manifest` tag), `plain` on one no cache holds."""
    text = json.dumps({"splits": {"train": {"tokens": SPLIT_TOKENS}, "val": {"tokens": 40}}})
    entry = cache / "tokens" / "abc"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text(text)
    client = MlflowClient(uri)
    exp = client.create_experiment("arms")
    parent = log_parent(client, exp, "arms", T0)
    start = T0
    for variant, finals in FINAL.items():
        hashed = manifest_hash(text) if variant != "plain" else "0000000000000000"
        for seed, final in enumerate(finals):
            start += 1000
            log_child(
                client, exp, parent, variant, seed, start,
                params={
                    "train.steps": str(STEPS), "train.batch_size": str(BATCH),
                    "train.seq_len": str(SEQ), "flops_per_token": "1000",
                    "num_params": str(PARAMS), "data.cache_dir": str(cache),
                },
                metrics=[
                    Metric("val/bpb", float(final), start, STEPS),
                    Metric("val/bpb_sampled", float(final), start, STEPS),
                ],
                tags={"data_manifest": hashed},
            )  # fmt: skip


MANIFEST = {
    "name": "scales",
    "title": "A study with a ladder",
    "equivalence_margin": 0.02,
    "streams": [["minimind run a.yaml"]],
    "arms": {
        "base": {"label": "baseline", "experiment": "arms", "variant": "base"},
        "good": {"label": "good", "experiment": "arms", "variant": "good"},
        "plain": {"label": "plain", "experiment": "arms", "variant": "plain"},
    },
    "axes": [
        {
            "name": "attention",
            "title": "Attention",
            "expected": "good better, plain better",
            "references": ["Somebody 2020"],
            "comparisons": [
                {"arm": "good", "against": "base", "expect": "better"},
                {"arm": "plain", "against": "base", "expect": "better"},
            ],
        }
    ],
    "ladders": [
        {
            "experiment": "lad",
            "title": "Two arms at four sizes",
            "extrapolate": 4,
            "axes": {"arm=fast": "attention"},
            "discussion": "The ladder's discussion.",
        }
    ],
}


def _study(tmp_path: Path, uri: str, manifest: dict = MANIFEST) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    folder = tmp_path / "report"
    assert (
        main(["study", "report", str(path), "--tracking-uri", uri, "--report-dir", str(folder)])
        == 0
    )
    return folder


def test_the_ladder_section_gives_compare_s_numbers(
    mlflow_uri: str, tmp_path: Path, capsys
) -> None:
    write_ladder(mlflow_uri, lambda c: 0.6)
    _write_arms(mlflow_uri, tmp_path / "cache")
    folder = _study(tmp_path, mlflow_uri)
    ladder = compare_ladder(load_runs(mlflow_uri, ["lad"]), extrapolate_factor=4)
    (result,) = ladder.results
    assert result.result is not None
    assert result.result.extrapolated_multiplier.value == pytest.approx(0.6, rel=1e-3)
    report = (folder / "report.md").read_text()
    assert "## At more than one scale" in report and "### Two arms at four sizes" in report
    # compare's own tables, line for line: fits, Δα, the extrapolated ×, the trend, each rung's
    # multiplier with its interval, decision and ranking
    for block in ladder_section(ladder):
        assert block.markdown() in report
    assert "**Discussion**: The ladder's discussion." in report
    assert "![ladder0](ladder0.png)" in report and (folder / "ladder0.png").is_file()
    # the axis points to the ladder's row of its arm
    headers, rows = result_rows(ladder)
    pointer = f"- At more than one scale, Two arms at four sizes: {rows[0][0]}: {headers[1]}: {rows[0][1]}"
    assert pointer in report
    html = (folder / "index.html").read_text()
    assert 'id="ladder-0"' in html and 'href="#ladder-0"' in html
    # ladder.csv is `minimind compare --format csv` of the same runs, the ladder named first
    assert main(["compare", "lad", "--tracking-uri", mlflow_uri, "--format", "csv",
                 "--extrapolate", "4"]) == 0  # fmt: skip
    expected = pd.read_csv(io.StringIO(capsys.readouterr().out))
    written = pd.read_csv(folder / "ladder.csv")
    assert list(written.columns[:1]) == ["ladder"] and set(written["ladder"]) == {"lad"}
    pd.testing.assert_frame_equal(written[expected.columns], expected)


def test_a_ladder_without_runs_yet_is_said_in_its_section(mlflow_uri: str, tmp_path: Path):
    _write_arms(mlflow_uri, tmp_path / "cache")
    folder = _study(tmp_path, mlflow_uri)
    report = (folder / "report.md").read_text()
    section = report[report.index("## At more than one scale") :]
    assert "- no runs of lad yet" in section
    assert "At more than one scale, Two arms at four sizes: arm=fast: no comparison yet" in report
    notes = pd.read_csv(folder / "ladder.csv")
    assert list(notes["ladder"]) == ["lad"] and "no runs of lad yet" in notes["ladder_notes"][0]
    assert "no runs of lad yet" in (folder / "index.html").read_text()


def test_a_ladder_still_training_is_reported_with_what_it_lacks(mlflow_uri: str, tmp_path: Path):
    """Two rungs so far, the variant's runs at the second still running: each rung compared,
    no law fitted (a power law needs 3 rungs), and the section says so."""
    write_ladder(mlflow_uri, lambda c: 0.6, rungs=("r0", "r1"), running=(("r1", "fast"),))
    _write_arms(mlflow_uri, tmp_path / "cache")
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    manifest["ladders"][0]["axes"]["arm=slow"] = "attention"
    report = (_study(tmp_path, mlflow_uri, manifest) / "report.md").read_text()
    section = report[report.index("## At more than one scale") :]
    assert "- incomplete: 9 of the 12 runs read have finished" in section
    assert (
        "ladders[0].axes.arm=slow: no run of arm 'arm=slow' yet; arms: arm=base, arm=fast"
        in section
    )
    assert "no seed finished at 3 or more points" in section
    assert "At more than one scale, Two arms at four sizes: arm=slow: no run of it yet" in report


def test_each_verdict_shows_its_arm_s_tokens_per_parameter_and_epochs(
    mlflow_uri: str, tmp_path: Path
) -> None:
    _write_arms(mlflow_uri, tmp_path / "cache")
    manifest = {k: v for k, v in MANIFEST.items() if k != "ladders"}
    manifest["sequential"] = {"looks": [3]}  # one look at the seeds trained: a decided row
    folder = _study(tmp_path, mlflow_uri, manifest)
    findings = pd.read_csv(folder / "findings.csv").set_index("arm")
    tokens = STEPS * BATCH * SEQ
    assert findings.loc["good", "train_tokens"] == tokens
    assert findings.loc["good", "train_split_tokens"] == SPLIT_TOKENS
    assert findings.loc["good", "tokens_per_param"] == pytest.approx(tokens / PARAMS)
    assert findings.loc["good", "epochs"] == pytest.approx(tokens / SPLIT_TOKENS)
    # a corpus the cache no longer holds: the epochs unknown, the tokens per parameter known
    assert findings.loc["plain", "tokens_per_param"] == pytest.approx(0.32)
    assert np.isnan(findings.loc["plain", "epochs"])
    report = (folder / "report.md").read_text()
    # beside every verdict, compactly: its scale's params, tokens (per param) and epochs
    assert "| agreement | scale: params, tokens, epochs |" in report
    assert "| agrees | 1k params, 320 tokens (0.32/param), 2 epochs |" in report
    assert f"320 tokens (0.32/param), {render.MISSING} epochs |" in report
    html = (folder / "index.html").read_text()
    assert "<th>agreement</th><th>scale: params, tokens, epochs</th>" in html
    assert not (folder / "ladder.csv").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["ladders"][0]["axes"].update({"arm=fast": "atention"}),
            "ladders[0].axes.arm=fast: unknown axis 'atention'; axes: attention",
        ),
        (
            lambda m: m["ladders"].append(dict(m["ladders"][0])),
            "ladders[1].experiment: ladder 'lad' twice",
        ),
        (lambda m: m["ladders"][0].update(extrapolate=0), "ladders[0].extrapolate"),
        (lambda m: m["ladders"][0].pop("title"), "ladders[0].title"),
        (lambda m: m["ladders"][0].update(baseline="x"), "ladders[0].baseline"),
    ],
)
def test_bad_ladder_entries_exit_2_naming_the_field(
    tmp_path: Path, capsys, change, message: str
) -> None:
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    change(manifest)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert main(["study", "report", str(path), "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
