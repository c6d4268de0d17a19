"""The `launcher:` section: where a spec's runs train, here (`local`) or as Slurm jobs (`slurm`).

    launcher:
      name: slurm
      partition: gpu
      timeout_min: 120
      gpus_per_node: 1
      additional_parameters: {account: lab, qos: normal}

The Slurm fields keep the names of Hydra's submitit launcher (the names a researcher who has
used it knows); `additional_parameters` are any further `sbatch` options, written without their
dashes. `local` may train several runs at once, each in its own process (`minimind.run.jobs`):

    launcher: {name: local, jobs: 4, jobs_per_gpu: 2, threads_per_job: 1}

The section says how runs train, never what: it is left out of the spec's hash and of
the runs' params, so the same spec trains the same runs under either launcher.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from minimind.foundations.strict_config import StrictNumbers, field_error

LauncherName = Literal["local", "slurm"]
DEFAULT_SLURM_FOLDER = "results/generated/slurm"
# Options the launcher sets itself: given again, they would break the job array or its logs.
_RESERVED_SBATCH = ("array", "output", "error", "signal", "open-mode", "wrap")
# What reaches the `#SBATCH` lines of the batch script submitit writes, checked here because a
# newline there would end the line and start a shell command: sbatch's option names (submitit
# writes them unquoted), Slurm's names (a partition list, an account, a qos), the folder (the
# jobs' log paths). Option values are quoted by submitit, so they only need to stay on one line.
_OPTION = re.compile(r"[a-z][a-z0-9_-]*")
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
_PATH = re.compile(r"[A-Za-z0-9_./+@:,=-]+")
_NAMED_OPTIONS = ("account", "qos", "reservation", "partition", "job-name", "wckey")


def _check_slurm_name(path: tuple[str, ...], value: str) -> str:
    if not _SLURM_NAME.fullmatch(value):
        field_error(
            path, f"must be letters, digits, '_', '.', '+' or '-' (a list: with ','), got {value!r}"
        )
    return value


class LauncherConfig(StrictNumbers):
    """Where the runs train and, for `slurm`, each job's resources (one job per variant × seed
    for `run` and `study`, one per worker for `sweep`)."""

    model_config = ConfigDict(extra="forbid")

    name: LauncherName = "local"
    jobs: int = Field(default=1, ge=1)
    """`local`: how many runs train at once on this host, each in its own process."""
    threads_per_job: int | None = Field(default=None, ge=1)
    """`local` with `jobs`: torch's CPU threads in each job (default: the cores / `jobs`)."""
    jobs_per_gpu: int = Field(default=1, ge=1)
    """`local` with `jobs`: how many jobs share one GPU (runs are placed round-robin)."""
    partition: str | None = Field(default=None, min_length=1)
    timeout_min: int = Field(default=60, ge=1)
    cpus_per_task: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    mem_gb: float | None = Field(default=None, gt=0)
    array_parallelism: int = Field(default=256, ge=1)
    signal_delay_s: int = Field(default=90, ge=0)
    """Seconds before the time limit at which Slurm signals the job to stop and be requeued."""
    max_requeues: int = Field(default=3, ge=0)
    """How many times a job that reached its time limit is requeued to continue."""
    additional_parameters: dict[str, str | int | float | bool] = Field(default_factory=dict)
    folder: str = Field(default=DEFAULT_SLURM_FOLDER, min_length=1)
    """The jobs' scripts, pickles and logs: a directory every node reaches."""

    @field_validator("partition")
    @classmethod
    def _safe_partition(cls, partition: str | None) -> str | None:
        return partition if partition is None else _check_slurm_name((), partition)

    @field_validator("folder")
    @classmethod
    def _safe_folder(cls, folder: str) -> str:
        if not _PATH.fullmatch(folder):
            field_error(
                (),
                f"must be a path of letters, digits and _ . / + @ : , = - (it is written into the jobs' batch script), got {folder!r}",
            )
        return folder

    @field_validator("additional_parameters")
    @classmethod
    def _safe_options(
        cls, options: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        for key, value in options.items():
            option = key.replace("_", "-")
            if option in _RESERVED_SBATCH:
                field_error((key,), f"--{option} is set by the launcher itself")
            if option.startswith("-"):
                field_error((key,), f"write the option without its dashes: {option.lstrip('-')}")
            if not _OPTION.fullmatch(key):
                # the key itself is not printable as a field path: named within the message
                field_error(
                    (), f"option {key!r}: an sbatch option is lowercase letters, digits, '_' or '-'"
                )
            if option in _NAMED_OPTIONS and isinstance(value, str):
                _check_slurm_name((key,), value)
            if value is False:
                field_error((key,), "a flag is written true; leave the option out to unset it")
            if isinstance(value, str) and not value.isprintable():
                field_error((key,), f"must be one line of printable characters, got {value!r}")
        return options
