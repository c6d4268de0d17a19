"""Work a spec asks for is bounded: an ablation grid is counted from its axes' sizes before any
variant is built, and a variant estimated past the host's memory does not start a real run;
each bound is the spec's own (`limits:`) to raise."""

from __future__ import annotations

import pytest

import minimind.run.plan as plan_module
from minimind.cli import main
from minimind.spec import load_spec

TEN = list(range(1, 11))


def test_a_grid_of_ten_million_variants_is_refused_with_its_count_before_it_is_built(
    write_spec, tmp_path, capsys
) -> None:
    ablate = {
        "train.optimizer.lr": [k / 1000 for k in TEN],
        "train.optimizer.weight_decay": [k / 100 for k in TEN],
        "train.steps": [k + 1 for k in TEN],
        "train.log_every": TEN,
        "train.eval_every": TEN,
        "train.grad_clip": [float(k) for k in TEN],
        "data.val_seed": TEN,
    }
    path = write_spec(ablate=ablate)
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", str(path), "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        "error: ablate: 10,000,000 variants, more than limits.max_variants (1,000); "
        "raise it to run them all\n"
    )
    assert sorted(tmp_path.rglob("*")) == before


def test_the_variant_cap_is_the_spec_s_to_raise(write_spec, capsys) -> None:
    path = write_spec(ablate={"train.optimizer.lr": [0.001, 0.002, 0.003]})
    assert main(["run", str(path), "-o", "limits.max_variants=2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ablate: 3 variants, more than limits.max_variants (2)")
    assert main(["run", str(path), "-o", "limits.max_variants=3", "--dry-run"]) == 0


def test_the_limits_are_no_part_of_the_params_or_the_hash(write_spec) -> None:
    from minimind.spec import flatten, spec_hash

    path = write_spec()
    default, raised = load_spec(path), load_spec(path, ["limits.max_variants=5000"])
    assert spec_hash(default) == spec_hash(raised)
    assert flatten(default) == flatten(raised)
    assert not [key for key in flatten(default) if key.startswith("limits")]


@pytest.fixture
def half_the_memory(write_spec, monkeypatch):
    """A spec whose only variant is estimated at twice this host's memory."""
    path = write_spec()
    (variant,) = plan_module.plan_run(load_spec(path)).variants
    need = plan_module.memory_estimate(variant).total
    monkeypatch.setattr(plan_module, "device_memory_bytes", lambda device: need // 2)
    return path


def test_a_variant_past_the_host_s_memory_does_not_start_a_real_run(
    half_the_memory, tmp_path, capsys
) -> None:
    assert main(["run", str(half_the_memory), "--dry-run"]) == 0  # the dry run warns
    assert "warning: base needs about " in capsys.readouterr().out
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", str(half_the_memory)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: limits.over_memory: base needs about ") and "GiB" in err
    assert err.endswith(" GiB (set it to warn to run it anyway)\n") and err.count("\n") == 1
    assert sorted(tmp_path.rglob("*")) == before  # nothing tokenized, no run


def test_over_memory_warn_lets_it_run(half_the_memory, capsys) -> None:
    assert main(["run", str(half_the_memory), "-o", "limits.over_memory=warn"]) == 0
