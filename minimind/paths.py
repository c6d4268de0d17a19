"""Where the commands write by default, relative to the working directory."""

from __future__ import annotations

from pathlib import Path

DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"
"""The MLflow store of `tracking.uri` and of `minimind compare --tracking-uri`."""

REPORTS_DIR = Path("results/reports")
"""Reports of `minimind compare --report` and `minimind sweep`, one folder each."""
