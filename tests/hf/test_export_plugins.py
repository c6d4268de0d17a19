"""`minimind export` imports no module a store names: the plugins of a run's stored spec are
imported only when the user passes them (`--plugin`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from mlflow import MlflowClient  # noqa: E402

from minimind import record  # noqa: E402
from minimind.cli import main  # noqa: E402

PLUGIN = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"


@pytest.fixture
def stored_run(write_spec, mlflow_uri, tmp_path, monkeypatch) -> dict:
    """A child run whose stored spec names the plugin `lab_store_plugin`, importable here."""
    marker = tmp_path / "imported"
    (tmp_path / "lab_store_plugin.py").write_text(PLUGIN.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lab_store_plugin", raising=False)
    spec = write_spec(plugins=["lab_store_plugin"])
    client = MlflowClient(mlflow_uri)
    tags = {
        record.ROLE_TAG: record.CHILD_ROLE,
        record.PLAN_HASH_TAG: "0" * 12,
        record.VARIANT_TAG: "base",
        record.SEED_TAG: "0",
    }
    run = client.create_run(client.create_experiment("tiny"), tags=tags)
    client.log_text(run.info.run_id, Path(spec).read_text(), "spec.yaml")
    yield {"id": run.info.run_id, "uri": mlflow_uri, "marker": marker}
    sys.modules.pop("lab_store_plugin", None)


def test_a_stored_spec_imports_no_plugin_the_user_did_not_pass(stored_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", stored_run["id"], str(out), "--tracking-uri", stored_run["uri"]]) == 2
    error = capsys.readouterr().err.splitlines()[-1]  # after MLflow's download progress bar
    assert error == (
        f"error: run {stored_run['id']}: its stored spec imports plugin modules "
        "lab_store_plugin, which a store's spec may not do on its own: if they are your code, "
        "pass --plugin lab_store_plugin"
    )
    assert not stored_run["marker"].exists() and "lab_store_plugin" not in sys.modules
    assert not out.exists()


def test_a_plugin_the_user_passes_is_imported(stored_run, tmp_path, capsys):
    argv = ["export", stored_run["id"], str(tmp_path / "out"), "--tracking-uri", stored_run["uri"]]
    # Past the plugins, the run has no checkpoint: the error after the import says so.
    assert main([*argv, "--plugin", "lab_store_plugin"]) == 2
    assert "its checkpoint" in capsys.readouterr().err.splitlines()[-1]
    assert stored_run["marker"].read_text() == "imported"
