"""A real one-node SLURM cluster on localhost (Debian's slurmctld, slurmd and munge) with two
fake GPUs: a kappa^max block and an iteration's invariant means of the small workflow (a GPU job
of each stage, on the local run's stores before them) run through
snakemake-executor-plugin-slurm and the profile in profiles/slurm, and their stores equal a
local run's.

Needs root and the Debian packages, which `.ci/run` installs; where they are missing, or where
/etc/slurm holds a real cluster's configuration, the test is skipped rather than touch it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ia_stages.pipeline.store import read_store

from .test_robustness import ROOT, assert_same_stores, fresh, snakemake, stores
from .test_workflow import TINY

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

MARK = "# written by the ia-stages test suite"
CONF, GRES = Path("/etc/slurm/slurm.conf"), Path("/etc/slurm/gres.conf")
BINARIES = ["slurmctld", "slurmd", "munged", "munge", "unmunge", "sbatch", "squeue", "sinfo"]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root to start slurmctld, slurmd and munged"
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return f"Debian SLURM packages not installed ({', '.join(absent)}); .ci/run installs them"
    if CONF.exists() and MARK not in CONF.read_text():
        return f"{CONF} belongs to a real cluster; not replacing it"
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed"
    return None


def _munge_works() -> bool:
    cred = subprocess.run(["munge", "-n"], capture_output=True)
    if cred.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True).returncode == 0


def _wait(check, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.3)


def _node_state() -> str:
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    gpus = [root / f"gpu{k}" for k in range(2)]
    for dev in gpus:  # fake GPUs: character devices like /dev/null, one per GRES entry
        os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
    host = socket.gethostname().split(".")[0]
    # The profile asks 16 GB and 4 CPUs for each heavy job; a node of the machine's real size
    # would run them one at a time. SlurmdParameters=config_overrides lets the node claim more
    # than it has (nothing is enforced: no cgroups), so the test's jobs run side by side.
    mem = max(int(Path("/proc/meminfo").read_text().split()[1]) // 1024 - 2048, 4 * 16000)
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(f"""{MARK}
ClusterName=iastages
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MinJobAge=600
GresTypes=gpu
NodeName={host} CPUs=16 RealMemory={mem} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    GRES.write_text(f"{MARK}\nNodeName={host} Name=gpu File={root}/gpu[0-1]\n")
    procs: list[subprocess.Popen] = []
    try:
        if not _munge_works():
            run = Path("/run/munge")
            run.mkdir(exist_ok=True)
            shutil.chown(run, "munge", "munge")
            procs.append(
                subprocess.Popen(
                    ["munged", "-F"], user="munge", group="munge", stderr=subprocess.DEVNULL
                )
            )
            _wait(_munge_works, "munged")
        procs.append(
            subprocess.Popen(
                ["slurmctld", "-D"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        _wait(lambda: _node_state() != "", "slurmctld")
        procs.append(
            subprocess.Popen(["slurmd", "-D"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait(lambda: _node_state() == "idle", "slurmd to register the node")
        yield root
    finally:
        for proc in reversed(procs):  # stop every daemon this fixture started, by PID
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for path in (CONF, GRES):
            if path.exists() and MARK in path.read_text():
                path.unlink()


# Two GPU jobs with no job between them and the local run's stores (the executor checks their
# status 5, 20, 45 s after they start, so every further level of jobs costs 15-25 s more): an
# off-diagonal kappa^max block of shapes3 (rule kmax_block), and mnist3's iteration-1 features,
# its invariant means in one job (rule means_whole). Snakemake keeps an output it has no record
# of (no params to compare), so the copied stores are inputs, not jobs.
TARGETS = ["results/shapes3/ia/iter0/kmax/0_1.zarr", "results/mnist3/ia/iter1/features.zarr"]
COPIED = [
    Path("results/data/shapes3.zarr"),
    Path("results/data/mnist3.zarr"),
    Path("results/mnist3/ia/iter0/kmax.zarr"),
]


def test_workflow_on_slurm_equals_a_local_run(slurm_cluster, tiny_reference, tmp_path):
    # backend auto with auto_gpu all: heavy rules then ask SLURM for one GPU each (numpy on
    # these fake GPUs, as the local run's backend)
    config = {**TINY, "backend": "auto", "auto_gpu": "all"}
    local = tiny_reference
    remote = fresh(tmp_path, "slurm", config)
    for rel in COPIED:
        shutil.copytree(local / rel, remote / rel)
    proc = snakemake(
        remote,
        "--profile",
        str(ROOT / "profiles" / "slurm"),
        "--jobs",
        "4",
        "--slurm-no-account",
        # The plugin checks first after this many seconds, then waits 10 s longer after each
        # check that finds no job finished. Every job here takes 12-14 s on an idle machine
        # (most of it the job's own Snakemake starting) and longer beside the other test
        # workers.
        "--slurm-init-seconds-before-status-checks",
        "5",
        "--default-resources",
        "slurm_partition=debug",
        "mem_mb=500",
        "runtime=10",
        "--latency-wait",
        "5",
        *TARGETS,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = [p for p in stores(remote) if p not in COPIED]
    assert sorted(map(str, made)) == sorted(TARGETS)
    assert_same_stores(local, remote, made)
    submitted = proc.stderr.count("has been submitted with SLURM jobid")
    assert submitted == len(made)  # every job went through sbatch
    for rel in made:  # SLURM's GRES gave each job one of the two fake GPUs
        assert read_store(remote / rel).attrs["cuda_visible_devices"] in {"0", "1"}, rel
