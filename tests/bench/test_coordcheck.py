"""`minimind coordcheck`: μP's coordinate check run tiny, its files, its errors, and the property
it shows: activations flat in width under mup, growing under the standard parametrization."""

from __future__ import annotations

import pytest

from minimind.bench.coordcheck import growth, read_csv
from minimind.cli import main
from tests.conftest import deep_update

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {
    "dim": 32,
    "n_layers": 2,
    "n_heads": 4,
    "attention": "mha",
    "mlp": "gelu",
    "tie_embeddings": False,
}
TRAIN = {"batch_size": 8, "seq_len": 32, "optimizer": {"name": "adamw", "lr": 0.01}}


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_grow_with_width_under_standard_and_stay_flat_under_mup(write_spec, tmp_path, seed):
    spec = write_spec(model=MODEL, train=TRAIN)
    out = tmp_path / "cc"
    argv = ["coordcheck", str(spec), "--widths", "32,128", "--steps", "3", "--seeds", str(seed)]
    assert main([*argv, "--out", str(out)]) == 0
    assert (out / "coordcheck.png").read_bytes().startswith(b"\x89PNG")
    rows = read_csv(out / "coordcheck.csv")
    coordinates = {r.coordinate for r in rows}
    assert coordinates == {
        "embedding",
        "logits",
        *(f"layer{i}.{part}" for i in range(2) for part in ("attn", "mlp", "block")),
    }
    assert {r.step for r in rows} == {0, 1, 2, 3}
    # step 3, width ×4. Measured over seeds 0-2: standard's logits grew 3.2-3.5×, its residual
    # streams 8-11×; mup's logits 0.90-1.02×, its streams 0.54-0.88×. The bounds leave margin.
    assert growth(rows, "standard", "logits", 3) > 2
    assert 2 / 3 < growth(rows, "mup", "logits", 3) < 1.5
    for layer in range(2):
        assert growth(rows, "standard", f"layer{layer}.block", 3) > 4
        assert 1 / 3 < growth(rows, "mup", f"layer{layer}.block", 3) < 1.5
    # at the base width the two parametrizations are one model: the same numbers
    base = {
        (r.coordinate, r.step): r.rms for r in rows if r.width == 32 and r.parametrization == "mup"
    }
    standard = {
        (r.coordinate, r.step): r.rms
        for r in rows
        if r.width == 32 and r.parametrization == "standard"
    }
    assert base.keys() == standard.keys()
    assert all(base[k] == pytest.approx(standard[k], rel=1e-4) for k in base)


@pytest.mark.parametrize(
    ("changes", "argv", "expected"),
    [
        (
            {"ablate": {"model.norm": ["rmsnorm", "layernorm"]}},
            [],
            "error: ablate: coordcheck checks one model",
        ),
        (
            {"train": {"optimizer": {"name": "sgd"}}},
            [],
            "error: train.optimizer.name: coordcheck compares",
        ),
        (
            {},
            ["--widths", "32,30"],
            "error: --widths: width 30: model.dim: dim (30) must be divisible",
        ),
        ({}, ["--steps", "0"], "error: --steps: must be >= 1"),
    ],
)
def test_a_bad_request_is_one_line_and_writes_nothing(
    write_spec, tmp_path, capsys, changes, argv, expected
):
    spec = write_spec(**deep_update({"model": MODEL, "train": TRAIN}, changes))
    out = tmp_path / "cc"
    assert main(["coordcheck", str(spec), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not out.exists()
