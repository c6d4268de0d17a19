"""`compare.report` and `compare.plots`: the HTML/markdown report, its figures and header."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from norm_store import (
    LN,
    RMS,
    T0,
    norm_curves,
    norm_params,
    run_cli,
)

from minimind.compare import (
    CompareOptions,
    compare,
    load_runs,
)


def test_the_report_header_shows_the_recorded_device(mlflow_uri) -> None:
    from minimind.compare.report import header_fields

    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("devices")
    parent = log_parent(client, exp, "devices", T0)
    devices = {"cpu": {"device": "cpu", "precision": "fp32"}}
    devices["gpu"] = {"device": "cuda", "gpu_name": "NVIDIA H100", "precision": "bf16"}
    for seed, (variant, tags) in enumerate(devices.items()):
        log_child(
            client, exp, parent, variant, seed, T0 + 1000 * (seed + 1),
            params=norm_params(RMS, seed), metrics=norm_curves(RMS, seed, T0), tags=tags,
        )  # fmt: skip
    fields = header_fields(compare(load_runs(mlflow_uri, ["devices"])))
    assert fields["device"] == "cpu, cuda (NVIDIA H100)"
    assert fields["precision"] == "bf16, fp32"


def test_runs_without_device_tags_say_unknown_rather_than_the_spec_s_auto(norm) -> None:
    from minimind.compare.report import header_fields

    fields = header_fields(norm)  # the synthetic runs log train.device as a param only
    assert fields["device"] == fields["precision"] == "unknown"


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> Path:
    from minimind.compare.report import write_report

    folder = tmp_path_factory.mktemp("report") / "norm"
    runset = load_runs(store["uri"], ["mlp", "norm"], all_runs=True)
    return write_report(compare(runset, CompareOptions(baseline=LN)), folder)


FIGURES = ["curves_train_loss", "curves_val_bpb", "final", "pareto", "moe_load"]


def test_report_files(report: Path) -> None:
    folder = report.parent
    for name in ["index.html", "report.md", "runs.csv", "comparison.csv"]:
        assert (folder / name).stat().st_size > 0, name
    for name in FIGURES:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    runs = pd.read_csv(folder / "runs.csv")
    assert len(runs) == 9 + 4 and set(runs["status"]) == {"FINISHED", "FAILED", "KILLED"}
    assert "val/bpb_mean" in pd.read_csv(folder / "comparison.csv").columns
    md = (folder / "report.md").read_text()
    assert all(f"]({name}.png)" in md for name in FIGURES)
    assert "| layernorm |" not in md  # the variants of two experiments share no key prefix


def test_index_html_inlines_every_figure(report: Path) -> None:
    import base64

    page = report.read_text()
    inlined = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [name for name, _ in inlined] == FIGURES
    for name, data in inlined:
        assert base64.b64decode(data) == (report.parent / f"{name}.png").read_bytes()
    assert not re.search(r'(src|href)="(?!data:)', page)  # self-contained: nothing to fetch
    for field in ("spec hash", "abc123def456", "git commit", "device", "dates"):
        assert field in page


def test_report_rows_are_styled_by_their_verdict_kind(report: Path) -> None:
    """The class of a row comes from what its verdict is, not from parsing its text."""
    scored = re.search(r'<table class="comparison">(.*?)</table>', report.read_text(), re.S)
    rows = re.findall(r'<tr class="([a-z-]+)"><td>([^<]+)</td>', scored.group(1))
    assert rows == [
        ("within-noise", RMS),
        ("untested", "model.norm=oldvariant"),
        ("baseline", LN),
        ("within-noise", "model.mlp=swiglu"),
        ("within-noise", "model.mlp=moe"),
    ]
    cost = re.search(r'<table class="comparison cost">(.*?)</table>', report.read_text(), re.S)
    assert "compute ×" in cost.group(1) and "verdict" not in cost.group(1)


def test_report_is_logged_to_the_parent_run(store, tmp_path) -> None:
    from minimind.compare.report import ARTIFACT_PATH, write_report

    write_report(compare(load_runs(store["uri"], ["mlp"])), tmp_path / "mlp")
    client = MlflowClient(store["uri"])
    logged = {Path(f.path).name for f in client.list_artifacts(store["mlp_parent"], ARTIFACT_PATH)}
    assert {"index.html", "report.md", "runs.csv", "final.png"} <= logged


def test_report_from_cli(store, tmp_path, capsys) -> None:
    code, out, err = run_cli(
        capsys, "norm", "--tracking-uri", store["uri"], "--report", "--report-dir", str(tmp_path)
    )
    assert code == 0 and "rmsnorm" in out
    assert f"{tmp_path}/index.html" in err and (tmp_path / "index.html").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]
# Appended to a copy of the page: records, once loaded, how many images decoded.


IMAGE_PROBE = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length;
  document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const tables = [...document.querySelectorAll("table.comparison")];
  document.body.dataset.tableWidths = tables.map(t => t.scrollWidth).join(",");
  document.body.dataset.viewport = document.documentElement.clientWidth;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
});</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_in_a_headless_browser(report: Path, tmp_path: Path) -> None:
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    dump = _chromium(
        tmp_path,
        "--virtual-time-budget=10000",
        "--window-size=1400,900",
        "--dump-dom",
        probe.as_uri(),
    )
    assert dump.returncode == 0, dump.stderr[-2000:]
    assert _console_messages(dump.stderr) == []
    images = int(re.search(r'data-images="(\d+)"', dump.stdout).group(1))
    decoded = int(re.search(r'data-decoded="(\d+)"', dump.stdout).group(1))
    assert images == decoded == len(FIGURES)
    bodies = re.findall(
        r'<table class="comparison[^"]*">.*?<tbody>(.*?)</tbody>', dump.stdout, re.S
    )
    # layernorm, rmsnorm, oldvariant, swiglu, moe: in each table
    assert [body.count("<tr") for body in bodies] == [5] * len(bodies) and bodies
    # Every column is in view at 1,400 px: no table, and not the page, scrolls sideways.
    viewport = int(re.search(r'data-viewport="(\d+)"', dump.stdout).group(1))
    widths = re.search(r'data-table-widths="([\d,]+)"', dump.stdout).group(1).split(",")
    page_width = int(re.search(r'data-page-width="(\d+)"', dump.stdout).group(1))
    assert viewport <= 1400 and page_width <= viewport, (viewport, page_width)
    assert max(int(w) for w in widths) <= viewport, (widths, viewport)
    screenshot = tmp_path / "report.png"
    shot = _chromium(
        tmp_path, f"--screenshot={screenshot}", "--window-size=1400,3000", report.as_uri()
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert _console_messages(shot.stderr) == []
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1400 and int.from_bytes(png[20:24], "big") == 3000
    print(f"report screenshot: {screenshot}")


def test_generated_reports_go_where_git_ignores_them() -> None:
    from minimind.foundations.paths import REPORTS_DIR

    repo = Path(__file__).resolve().parents[2]
    probe = REPORTS_DIR / "quickstart" / "index.html"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=repo)
    assert ignored.returncode == 0, f"{probe} would be tracked by git"


def test_report_figures_tokens_in_engineering_notation_and_no_truncated_bars(norm) -> None:
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import EngFormatter

    from minimind.compare.plots import curves_figure, final_bar_figure

    curves = curves_figure(norm, "train/loss")
    tokens_axis = curves.axes[1]
    assert isinstance(tokens_axis.xaxis.get_major_formatter(), EngFormatter)
    assert tokens_axis.xaxis.get_major_formatter().format_data(1_500_000) == "1.5M"
    final = final_bar_figure(norm)
    # No bar whose length encodes the value on an axis that does not start at zero.
    assert not [p for p in final.axes[0].patches if isinstance(p, Rectangle)]
    assert final.axes[0].lines  # the mean ± std intervals
