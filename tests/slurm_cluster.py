"""A throwaway single-node Slurm cluster for tests: munged, slurmctld and slurmd of this host.

    from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture, in a test module)

    def test_x(slurm_cluster): ...            # SLURM_CONF is set: sbatch, squeue, scancel work

One node, this host's short name, with 2 CPUs; `proctrack/linuxproc` and `task/none`, so that
no cgroup is needed; no accounting (`sacct` answers nothing, which the launcher does not need);
credentials that expire after 10 s, which is also how long a requeued job waits to start again
(Slurm's default, 120 s, would make the requeue test two minutes longer).
The munge key, the configuration, the state directories, the logs and the daemons' sockets live
in a fresh temporary directory and every daemon is stopped at the end. The test is skipped, with
the reason, where Slurm or munge is not installed (Debian: `apt-get install -y slurm-wlm munge`,
which `.ci/run` does), where this user is not root (slurmd starts jobs as their users), or where
the cluster does not come up (the daemons' log is in the reason).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 60
CPUS = 2
DAEMONS = ("munged", "slurmctld", "slurmd")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(root: Path, node: str, memory_mb: int) -> str:
    return f"""\
ClusterName=minimind-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
SchedulerParameters=sched_interval=1
NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory={memory_mb} State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _start(root: Path, node: str) -> None:
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munged = [
        "munged",
        "--force",
        f"--key-file={key}",
        f"--socket={root}/munge.socket",
        f"--pid-file={root}/munged.pid",
        f"--log-file={root}/munged.log",
        f"--seed-file={root}/munged.seed",
    ]
    for command in (munged, ["slurmctld"], ["slurmd", "-N", node]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(
                f"{command[0]} did not start: {(done.stderr or done.stdout).strip()}"
            )


def _wait_idle(root: Path, node: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    state = ""
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True
        )
        state = done.stdout.strip() or done.stderr.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    logs = "; ".join(
        f"{log.name}: {log.read_text(errors='replace').strip().splitlines()[-1:]}"
        for log in sorted(root.glob("*.log"))
    )
    raise RuntimeError(f"node {node} is {state or 'unknown'}, not idle ({logs})")


def _stop(root: Path) -> None:
    """Cancel every job, wait for the queue to empty, then stop the daemons: a daemon stopped
    first would leave its jobs' processes behind."""
    listed = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.split():
        subprocess.run(["scancel", *listed.stdout.split()], capture_output=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            left = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
            if left.returncode != 0 or not left.stdout.split():
                break
            time.sleep(0.5)
    for daemon in reversed(DAEMONS):
        pid_file = root / f"{daemon}.pid"
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):  # never started, or already gone
            continue
    time.sleep(1)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[Path]:
    """The running cluster's directory (logs in it); SLURM_CONF points at its slurm.conf."""
    missing = [tool for tool in (*DAEMONS, "sbatch", "srun", "sinfo") if not shutil.which(tool)]
    if missing:
        pytest.skip(
            f"Slurm is not installed ({', '.join(missing)} missing): apt-get install -y slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("a test Slurm cluster needs root (slurmd starts each job as its user)")
    root = Path(tempfile.mkdtemp(prefix="minimind-slurm-"))
    node = socket.gethostname().split(".")[0]
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node, memory_mb))
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        try:
            _start(root, node)
            _wait_idle(root, node)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            _stop(root)
            pytest.skip(f"the test Slurm cluster did not start: {err}")
        yield root
    finally:
        _stop(root)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(root, ignore_errors=True)
