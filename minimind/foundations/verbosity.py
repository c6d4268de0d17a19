"""What other libraries may print: only their warnings and errors, unless `minimind -v` asks for all.

MLflow logs INFO lines when it creates a database ("Creating initial MLflow database tables...")
and writes "View run ... at: URL" links to stdout after every run it ends on a tracking server;
the torch profiler's kineto library writes a USDT line at each start and stop of a profile. None
of it tells a minimind user anything. Each library reads its verbosity from an environment
variable, so `quiet_libraries` sets those before the libraries are imported; torchrun's ranks and
spawned sweep workers inherit them. A variable the user set is left as it is. Optuna reads no
variable (it logs a line per study created and per trial finished): `quiet_optuna` lowers its
level in each process that uses it, unless `-v` was given (`MINIMIND_VERBOSE`, inherited too).
"""

from __future__ import annotations

import os

VERBOSE_VARIABLE = "MINIMIND_VERBOSE"  # set by `-v`, read by `quiet_optuna`
QUIET_ENVIRONMENT = {
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # kineto's levels run VERBOSE 0 ... ERROR 4, USDT 5: only a level above all of them hides
    # the USDT lines (kineto's own errors concern its profiling daemon, which minimind never uses).
    "KINETO_LOG_LEVEL": "6",
}


def quiet_libraries(verbose: bool) -> None:
    """Silence the libraries' informational output for this process and its children, unless
    `verbose`. Call it before MLflow or the profiler is first used."""
    if verbose:
        os.environ[VERBOSE_VARIABLE] = "1"
        return
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def quiet_optuna() -> None:
    """Optuna's warnings and errors only, unless `minimind -v`; call in each process using it."""
    if os.environ.get(VERBOSE_VARIABLE) == "1":
        return
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
