"""What `minimind export` exports: the model, its trained weights and its tokenizer, from a run
(an MLflow child run id) or from one of its checkpoints (`last.pt`).

A checkpoint holds the weights and the ids of its MLflow runs (`run_ids`); the run holds the
resolved spec it trained (`spec.yaml`, so the model's config and the data it was tokenized with)
and, through its tags, where its checkpoint is (`record.checkpoint_path`). The tokenizer is the
one the run trained with, from the data cache (`prepare_data`, which rebuilds it where the cache
is gone).

A store may come from elsewhere, so its `spec.yaml` is not the user's code: the plugin modules it
names are imported only when the user names them too (`minimind export --plugin MODULE`).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tokenizers import Tokenizer

from minimind import record
from minimind.foundations.errors import MinimindError
from minimind.model.config import ModelConfig
from minimind.spec import SpecError, load_spec
from minimind.spec.loader import safe_load_unique
from minimind.training.checkpoint import OWNER_KEY, CheckpointError, RunCheckpoint, load_checkpoint


class SourceError(MinimindError):
    """A run or checkpoint that cannot be exported; the message says which and why."""


@dataclass
class TrainedModel:
    config: ModelConfig
    weights: dict[str, Any]  # MiniMindLM state dict
    tokenizer: Tokenizer
    run_id: str


def load_source(source: str, tracking_uri: str, plugins: Sequence[str] = ()) -> TrainedModel:
    """The model of `source`: a checkpoint file, or the id of a child run in `tracking_uri`.
    `plugins`: the plugin modules the user allows the run's stored spec to import; a spec that
    names any other is a `SourceError`, and nothing of it is imported."""
    state = None
    run_id = source
    if Path(source).is_file():
        try:
            state = load_checkpoint(source)
        except CheckpointError as exc:
            raise SourceError(str(exc)) from exc
        except pickle.UnpicklingError as exc:  # a pickle that is not weights-only: refused
            raise SourceError(f"{source}: not a readable checkpoint ({exc!s:.80})") from exc
        run_ids = state.get(OWNER_KEY) if isinstance(state, dict) else None
        if not isinstance(run_ids, dict) or "child" not in run_ids or "model" not in state:
            raise SourceError(f"{source}: not a minimind training checkpoint")
        run_id = run_ids["child"]
    run = _child_run(run_id, tracking_uri, source)
    spec = _run_spec(run_id, tracking_uri, plugins)
    if state is None:
        state = _run_checkpoint(run, spec.train.checkpoint_dir, spec.tracking.experiment)
    from minimind.data import prepare_data

    tokenizer = prepare_data(spec.data).tokenizer
    return TrainedModel(spec.model_config_obj(), state["model"], tokenizer, run_id)


def _child_run(run_id: str, tracking_uri: str, source: str) -> Any:
    from mlflow.exceptions import MlflowException

    from minimind.tracking.backend import StoreMissing, connect_existing

    try:
        run = connect_existing(tracking_uri).get_run(run_id)
    except StoreMissing as exc:
        raise SourceError(f"{source}: {exc}") from exc
    except MlflowException as exc:
        what = "checkpoint of run" if run_id != source else "no checkpoint file and no run"
        raise SourceError(f"{source}: {what} {run_id!r} in {tracking_uri}") from exc
    if run.data.tags.get(record.ROLE_TAG) != record.CHILD_ROLE:
        raise SourceError(f"{source}: run {run_id} is not a training run (a variant x seed)")
    return run


def _run_checkpoint(run: Any, checkpoint_dir: str, experiment: str) -> dict[str, Any]:
    """The state of `run`'s own checkpoint (`RunCheckpoint.file`, under its run id; or, from an
    earlier version, the shared path every invocation of a spec wrote, when stamped with it)."""
    run_id, tags = run.info.run_id, run.data.tags
    plan_hash = tags.get(record.PLAN_HASH_TAG, tags.get(record.LEGACY_HASH_TAG))
    variant, seed = tags.get(record.VARIANT_TAG), tags.get(record.SEED_TAG)
    if plan_hash is None or variant is None or seed is None or not seed.isdigit():
        raise SourceError(
            f"run {run_id}: its tags {record.PLAN_HASH_TAG}, {record.VARIANT_TAG} and "
            f"{record.SEED_TAG} do not say where its checkpoint is"
        )
    path = record.checkpoint_path(checkpoint_dir, experiment, plan_hash, variant, int(seed))
    try:
        checkpoint = RunCheckpoint(path, {"child": run_id})
        found = checkpoint.load()
    except CheckpointError as exc:
        raise SourceError(f"run {run_id}: {exc}") from exc
    if found is not None:
        return found[0]
    # `path`: where an earlier version kept the checkpoint of every invocation of the spec.
    for candidate in (checkpoint.file, path):
        if candidate.is_file():
            raise SourceError(
                f"run {run_id}: its checkpoint {candidate} belongs to another run (another "
                "invocation of the same spec); export that file to export that run"
            )
    raise SourceError(f"run {run_id}: its checkpoint {checkpoint.file} does not exist")


def _run_spec(run_id: str, tracking_uri: str, plugins: Sequence[str]) -> Any:
    import mlflow

    # MLflow's download bar, for one small file, would print between the command's own lines
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    with tempfile.TemporaryDirectory() as scratch:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id,
                artifact_path="spec.yaml",
                dst_path=scratch,
                tracking_uri=tracking_uri,
            )
        except Exception as exc:  # MLflow raises several kinds for a missing artifact
            raise SourceError(f"run {run_id}: its spec.yaml artifact cannot be read") from exc
        _check_plugins(run_id, Path(path), plugins)
        try:
            return load_spec(path)
        except SpecError as exc:
            raise SourceError(f"run {run_id}: its spec.yaml: {exc}") from exc


def _check_plugins(run_id: str, path: Path, allowed: Sequence[str]) -> None:
    """Refuse, before `load_spec` imports anything, a stored spec naming plugin modules the user
    did not pass (`--plugin`): a store's spec is not the user's code."""
    try:
        tree = safe_load_unique(path.read_text(encoding="utf-8"))
    except (SpecError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SourceError(f"run {run_id}: its spec.yaml is not a spec ({exc!s:.80})") from None
    named = tree.get("plugins") if isinstance(tree, dict) else None
    if named is None:
        return
    if not isinstance(named, list) or not all(isinstance(m, str) for m in named):
        raise SourceError(f"run {run_id}: its spec.yaml: plugins: not a list of module names")
    unknown = [module for module in named if module not in allowed]
    if unknown:
        flags = " ".join(f"--plugin {module}" for module in unknown)
        raise SourceError(
            f"run {run_id}: its stored spec imports plugin modules {', '.join(unknown)}, which "
            f"a store's spec may not do on its own: if they are your code, pass {flags}"
        )
