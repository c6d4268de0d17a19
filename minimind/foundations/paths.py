"""Where the commands write by default, relative to the working directory."""

from __future__ import annotations

from pathlib import Path

DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"
"""The MLflow store of `tracking.uri` and of `minimind compare --tracking-uri`."""

REPORTS_DIR = Path("results/generated")
"""Reports of `minimind compare --report` and `minimind sweep`, one folder each. Git ignores it,
so running the examples leaves a clone clean; curated reports live in `results/reports/` and are
committed on purpose (`--report-dir results/reports/quickstart`)."""
