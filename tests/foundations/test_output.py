"""What a user sees: progress lines off a terminal and the bar on one, one rank speaking for all,
and other libraries' chatter (MLflow's INFO lines and run links, the profiler's USDT lines) kept
out unless `-v` asks for it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minimind.cli import build_parser, main
from minimind.foundations import progress
from minimind.foundations.verbosity import QUIET_ENVIRONMENT, quiet_libraries
from minimind.training import distributed


def environment_without_quieting() -> dict[str, str]:
    """This process's environment less the variables an in-process `main()` may have set."""
    return {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}


def test_a_run_off_a_terminal_prints_a_line_per_log_window_and_no_mlflow_info(write_spec):
    path = write_spec()  # 12 steps, log_every 3, a new MLflow database (its creation logs INFO)
    result = subprocess.run(
        [sys.executable, "-m", "minimind", "run", str(path)],
        capture_output=True,  # pipes: neither stream is a terminal
        text=True,
        env={**environment_without_quieting(), "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    line = r"^base/seed0 step (\d+)/12 loss \d+\.\d{4} lr \d\.\d\de[-+]\d\d (?:[\d,]+|-) tok/s$"
    assert re.findall(line, result.stderr, re.MULTILINE) == ["3", "6", "9", "12"], result.stderr
    assert "INFO mlflow" not in result.stderr
    assert "base/seed0: FINISHED at step 12" in result.stdout


def test_the_display_is_a_bar_on_a_terminal_lines_elsewhere_and_nothing_when_quiet(
    monkeypatch, capsys
):
    """One display for every long task (training, tokenizing)."""
    monkeypatch.setattr(progress, "is_terminal", lambda: True)
    with progress.display("task", 10, 0, status="-") as shown:
        assert isinstance(shown, progress.Bar)
        shown.report(3, status="halfway", line="not printed")
        task = shown.progress.tasks[0]
        assert (task.completed, task.total, task.fields["status"]) == (3, 10, "halfway")
    capsys.readouterr()  # the bar's last frame
    monkeypatch.setattr(progress, "is_terminal", lambda: False)
    with progress.display("task", 10, 0) as shown:
        shown.advance(1)  # a position only a bar shows
        shown.report(2, status="s", line="task 2/10")
    assert capsys.readouterr().err == "task 2/10\n"
    with progress.display("task", 10, 0, quiet=True) as shown:
        assert isinstance(shown, progress.Silent)
    monkeypatch.setattr(progress.multiprocessing, "parent_process", lambda: object())
    with progress.display("task", 10, 0) as shown:  # a spawned worker
        assert isinstance(shown, progress.Silent)


def test_a_run_reports_its_log_windows_and_keeps_quiet_off_rank_0(monkeypatch, capsys):
    monkeypatch.setattr(progress, "is_terminal", lambda: False)
    with progress.training_progress("v/seed0", 10, 0) as shown:
        shown.advance(1)
        shown.log(2, 5.123456, 3e-3, float("nan"))  # warm-up: no rate yet
        shown.log(4, 4.5, 1.5e-4, 12345.6)
    with progress.training_progress("", None, 0) as shown:  # a time budget: no total
        shown.log(3, 4.0, 1e-3, 100.0)
    assert capsys.readouterr().err.splitlines() == [
        "v/seed0 step 2/10 loss 5.1235 lr 3.00e-03 - tok/s",
        "v/seed0 step 4/10 loss 4.5000 lr 1.50e-04 12,346 tok/s",
        "step 3 loss 4.0000 lr 1.00e-03 100 tok/s",
    ]
    monkeypatch.setattr(progress, "is_terminal", lambda: True)
    with progress.training_progress("v/seed0", 10, 0) as shown:
        shown.log(4, 4.5, 1.5e-4, 12345.6)
        assert shown.shown.progress.tasks[0].fields["status"] == "loss 4.500  12,346 tok/s"
    with progress.training_progress("v/seed0", 10, 0, quiet=True) as shown:
        assert isinstance(shown.shown, progress.Silent)


def test_tokenizing_reports_each_piece_through_the_same_display(monkeypatch, capsys):
    from minimind.data import prepare

    monkeypatch.setattr(progress, "is_terminal", lambda: False)
    counts = {split: {"docs": 10, "tokens": 500, "bytes": 2000} for split in ("train", "val")}
    with prepare._progress("tiny", 3, 1) as advance:  # one piece done before
        advance(counts)
        advance(counts)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" tokens")[0] for line in lines] == [
        "tokenized tiny: piece 2/3, 20 docs  1,000",
        "tokenized tiny: piece 3/3, 40 docs  2,000",
    ]


def test_only_rank_0_prints_the_lines_every_rank_would(monkeypatch, capsys):
    distributed.main_print("rank 0 says")
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    distributed.main_print("rank 1 says")
    assert capsys.readouterr().out == "rank 0 says\n"


def test_ddp_is_built_without_the_deprecated_buffer_option(tmp_path):
    """torch 2.13 deprecated `broadcast_buffers` with a FutureWarning per rank and model."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = DistributedDataParallel(
                torch.nn.Linear(4, 4), **distributed.NO_FORWARD_BUFFER_SYNC
            )
        assert not model.broadcast_buffers  # no broadcast in each forward
    finally:
        dist.destroy_process_group()


def test_quiet_libraries_sets_what_the_user_did_not_and_verbose_sets_nothing(monkeypatch):
    for name in QUIET_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    quiet_libraries(verbose=True)
    assert not set(QUIET_ENVIRONMENT) & set(os.environ)
    monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "DEBUG")
    quiet_libraries(verbose=False)
    assert os.environ["MLFLOW_LOGGING_LEVEL"] == "DEBUG"  # the user's own choice stays
    assert os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] == "true"
    assert os.environ["KINETO_LOG_LEVEL"] == QUIET_ENVIRONMENT["KINETO_LOG_LEVEL"]


@pytest.mark.parametrize(
    ("argv", "verbose"),
    [
        (["registry"], False),
        (["-v", "registry"], True),
        (["registry", "--verbose"], True),
    ],
)
def test_verbose_before_or_after_the_command_reaches_quiet_libraries(
    monkeypatch, capsys, argv, verbose
):
    calls = []
    monkeypatch.setattr("minimind.cli.quiet_libraries", calls.append)
    assert main(argv) == 0
    assert calls == [verbose]
    assert "--verbose" in build_parser().format_help()


def test_nproc_passes_verbose_on_to_the_ranks(write_spec, monkeypatch):
    launched = []
    monkeypatch.setattr(
        distributed, "launch", lambda nproc, argv, verbose: launched.append(argv) or 0
    )
    assert main(["run", str(write_spec()), "--nproc", "2", "-v"]) == 0
    assert launched[0][-1] == "--verbose"


PROFILE = """
import sys, torch
from minimind.foundations.verbosity import quiet_libraries
quiet_libraries(verbose=sys.argv[1] == "verbose")
from minimind.training.memory import transient_peak_bytes
transient_peak_bytes(lambda: torch.ones(64, 64) @ torch.ones(64, 64), torch.device("cpu"))
"""


def test_the_profiler_prints_no_usdt_lines_unless_verbose():
    def stderr(mode: str) -> str:
        command = [sys.executable, "-c", PROFILE, mode]
        env = environment_without_quieting()
        return subprocess.run(command, capture_output=True, text=True, env=env, check=True).stderr

    if "USDT" not in stderr("verbose"):
        pytest.skip("this torch's profiler prints no USDT lines")
    assert "USDT" not in stderr("quiet")
