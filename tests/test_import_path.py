"""`python -m minimind` does not let a `.py` file of the working directory stand in for a
module installed elsewhere (a plugin a spec names, a library)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "from pathlib import Path\nPath({marker!r}).write_text({who!r})\n"


def test_a_file_of_the_working_directory_does_not_shadow_a_plugin(tmp_path: Path) -> None:
    installed, work, marker = tmp_path / "site", tmp_path / "work", tmp_path / "imported"
    installed.mkdir()
    work.mkdir()
    for folder, who in ((installed, "installed"), (work, "working directory")):
        (folder / "lab_norms.py").write_text(PLUGIN.format(marker=str(marker), who=who))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{installed}"}
    env.pop("PYTHONSAFEPATH", None)
    done = subprocess.run(
        [sys.executable, "-m", "minimind", "registry", "--plugin", "lab_norms"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "installed"


def test_a_module_found_only_in_the_working_directory_still_imports(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "my_local_norms.py").write_text(PLUGIN.format(marker=str(marker), who="local"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "minimind", "registry", "--plugin", "my_local_norms"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "local"
