"""The dependencies: floors past the fixed versions of published advisories, and the versions
tested pinned in `constraints.txt`, which CI and `make install` install with."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")
ROOT = Path(__file__).resolve().parents[1]
# The first version that fixes each advisory (its CVE), for a direct dependency.
FIXED = {
    "torch": ("2.6.0", "CVE-2025-32434: torch.load(weights_only=True) runs code"),
    "pyarrow": ("14.0.1", "CVE-2023-47248: reading IPC or Parquet runs code"),
    "mlflow": ("3.1.0", "CVE-2025-52967 and the path traversals of 2.x"),
    "filelock": ("3.20.1", "CVE-2025-68146: a symlink race on the lock file"),
    "transformers": ("4.53.0", "the ReDoS advisories of 2025 (CVE-2025-3263, CVE-2025-6921)"),
    "setuptools": ("78.1.1", "CVE-2025-47273: path traversal in package_index"),
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> dict[str, Requirement]:
    project = _pyproject()
    lines = [
        *project["project"]["dependencies"],
        *(r for extra in project["project"]["optional-dependencies"].values() for r in extra),
        *project["build-system"]["requires"],
    ]
    found = {}
    for line in lines:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) != "minimind-lab":
            found[canonicalize_name(requirement.name)] = requirement
    return found


def _constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


@pytest.mark.parametrize("name", sorted(FIXED))
def test_no_version_with_a_fixed_advisory_is_allowed(name: str) -> None:
    fixed, advisory = FIXED[name]
    specifier = _requirements()[name].specifier
    floors = [Version(s.version) for s in specifier if s.operator in (">=", "==", "~=")]
    assert floors and min(floors) >= Version(fixed), f"{name}{specifier} admits {advisory}"


def test_the_installed_torch_is_allowed() -> None:
    assert Version("2.13.0") in _requirements()["torch"].specifier
    assert _constraints()["torch"] == Version("2.13.0")


def _dev_requirements() -> set[str]:
    """The packages `pip install -e ".[dev]"` asks for: the dependencies, and the extras `dev`
    names, transitively (not `dashboard` or `corpora`, which a user installs on purpose)."""
    extras = _pyproject()["project"]["optional-dependencies"]
    names: set[str] = set()
    todo, seen = ["dev"], set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for line in extras[extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == "minimind-lab":
                todo += [e for e in requirement.extras if e not in seen]
            else:
                names.add(canonicalize_name(requirement.name))
    return names | {
        canonicalize_name(Requirement(r).name) for r in _pyproject()["project"]["dependencies"]
    }


def test_the_constraints_pin_every_requirement_within_its_range() -> None:
    pins = _constraints()
    installed = _dev_requirements()
    for name, requirement in _requirements().items():
        if name not in installed:  # build-time, or an extra outside dev
            continue
        assert name in pins, f"constraints.txt does not pin {name}"
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} not in {requirement}"


def test_ci_and_make_install_with_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert '$(PIP) install -q -c constraints.txt -e ".[dev]"' in makefile
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -c constraints.txt torch==2.13.0" in ci
    assert "make lint test test-slow" in ci  # whose install is the Makefile's
