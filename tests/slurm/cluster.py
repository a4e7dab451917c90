"""A real single-node Slurm cluster, started for the tests and stopped after them.

Debian's Slurm 22.05 and munge packages (installed with apt when they are missing and this
process may: root and ``apt-get``), the daemons run in the foreground as children of this
process, every file (keys, sockets, state, spool, logs, MariaDB's data) under one folder,
every port a free one picked at start, so a Slurm already on the machine is never touched.
Optionally with accounting as real clusters have it: ``slurmdbd`` over a MariaDB of its own.

Clients reach the cluster through ``SLURM_CONF`` in :meth:`SlurmCluster.env`; ``sbatch``
exports the submitting process's environment to the jobs.

The daemons run without systemd or cgroups (``proctrack/linuxproc``, ``task/none``), as root.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")
ACCOUNTING_TOOLS = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacctmgr", "sacct")
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"
PARTITION = "debug"
# A second, smaller partition: a time limit a request can exceed.
SHORT_PARTITION = "short"
SHORT_PARTITION_MAX_MIN = 10
# Memory kept back from what the node reports, so that slurmd accepts the node.
RESERVED_MEMORY_MB = 1024
# The node's CPUs, whatever the machine has: the tests' requests and timings assume this many.
NODE_CPUS = 2
START_TIMEOUT_S = 60
APT_LOCK_WAIT_S = 300
STOP_TIMEOUT_S = 20


class ClusterUnavailable(RuntimeError):
    """Why no cluster could be started here."""


def tool_path() -> str:
    return os.environ.get("PATH", "") + os.pathsep + SBIN_PATH


def missing_tools(accounting: bool) -> list[str]:
    tools = SLURM_TOOLS + (ACCOUNTING_TOOLS if accounting else ())
    return [tool for tool in tools if shutil.which(tool, path=tool_path()) is None]


def install(accounting: bool) -> None:
    """Install Debian's packages for the missing tools, or say why that cannot be done."""
    missing = missing_tools(accounting)
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable(
            f"Slurm is not installed ({', '.join(missing)} missing) and "
            "there is no apt-get to install Debian's packages"
        )
    packages = SLURM_PACKAGES + (ACCOUNTING_PACKAGES if accounting else ())
    # Another apt (a machine's own updates, say) may hold dpkg's lock: wait for it, not fail.
    wait = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
    command = ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *packages]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", *wait, "update", "-q"], env=env, capture_output=True)
        result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0 or missing_tools(accounting):
        raise ClusterUnavailable(
            f"apt-get install {' '.join(packages)} failed:\n{result.stdout[-2000:]}"
            f"{result.stderr[-2000:]}"
        )


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports nothing listens on now (the kernel's pick, never Slurm's
    default 6817-6819)."""
    sockets = []
    try:
        while len(sockets) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            if not 6817 <= s.getsockname()[1] <= 6819:
                sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def node_line(hostname: str) -> str:
    """The node as ``slurmd -C`` sees it, with memory kept back, no UpTime and ``NODE_CPUS``
    CPUs (``SlurmdParameters=config_overrides`` lets slurmd offer what it is told)."""
    described = subprocess.run(
        [shutil.which("slurmd", path=tool_path()), "-C"], capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    fields = dict(word.split("=", 1) for word in described.split())
    fields["NodeName"] = hostname
    fields["RealMemory"] = str(int(fields["RealMemory"]) - RESERVED_MEMORY_MB)
    fields.pop("UpTime", None)
    fields.update(
        CPUs=str(NODE_CPUS),
        Boards="1",
        SocketsPerBoard="1",
        CoresPerSocket=str(NODE_CPUS),
        ThreadsPerCore="1",
    )
    return " ".join(f"{k}={v}" for k, v in fields.items()) + " NodeAddr=127.0.0.1 State=UNKNOWN"


@dataclass
class SlurmCluster:
    """One controller, one node, partitions ``debug`` (default) and ``short``."""

    root: Path
    accounting: bool
    name: str = "dmgtest"
    hostname: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the cluster's client settings."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = env.get("PATH", "") + os.pathsep + SBIN_PATH
        for name in [n for n in env if n.startswith(("SBATCH_", "SLURM_")) and n != "SLURM_CONF"]:
            del env[name]
        return env

    def run(self, *command: str, check: bool = True, timeout: float = 60) -> str:
        """A Slurm client command against this cluster; its standard output."""
        result = subprocess.run(
            command, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
        return result.stdout

    # Start

    def start(self) -> None:
        for folder in ("etc", "munge", "state", "spool", "log", "run"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        # munged wants every folder above its socket open to all, which a test's temporary
        # folder is not: the socket alone lives in a folder of its own under the system's.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="dmg-munge-"))
        self.socket_dir.chmod(0o755)
        ports = free_ports(4)
        self.ctld_port, self.slurmd_port, self.dbd_port, self.db_port = ports
        try:
            self._start_munge()
            if self.accounting:
                self._start_accounting()
            self._write_slurm_conf()
            self._spawn("slurmctld", "slurmctld", "-D", "-f", str(self.conf))
            self._until(lambda: "UP" in self.run("scontrol", "ping", check=False), "slurmctld up")
            self._spawn("slurmd", "slurmd", "-D", "-f", str(self.conf))
            self._until(self._node_idle, "the node idle")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, *command: str) -> None:
        executable = shutil.which(command[0], path=tool_path())
        with open(self.root / "log" / f"{name}.out", "wb") as log:  # the child keeps its copy
            self.processes[name] = subprocess.Popen(
                [executable, *command[1:]],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                start_new_session=True,  # Ctrl-C on the tests reaches them through stop() only
            )

    def _until(self, ready, what: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ClusterUnavailable(
                        f"{name} exited with status {process.returncode} while waiting for "
                        f"{what}:\n{self.log_tail(name)}"
                    )
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"no {what} after {timeout:.0f} s")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 20) -> str:
        texts = []
        for path in (self.root / "log").glob(f"{name}*"):
            texts += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(texts)

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.munge_socket = self.socket_dir / "munge.socket"
        self._spawn(
            "munged",
            "munged",
            "--foreground",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={self.root / 'munge' / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={self.root / 'munge' / 'munged.seed'}",
        )
        self._until(self.munge_socket.exists, "munge socket")

    def _start_accounting(self) -> None:
        data = self.root / "mariadb"
        subprocess.run(
            [
                shutil.which("mariadb-install-db", path=tool_path()),
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root",
            ],
            capture_output=True,
            check=True,
        )
        self._spawn(
            "mariadbd",
            "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--bind-address=127.0.0.1",
            f"--port={self.db_port}",
            f"--socket={self.root / 'run' / 'mariadb.sock'}",
            f"--pid-file={self.root / 'run' / 'mariadb.pid'}",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=16M",
        )
        self._until(lambda: self._listening(self.db_port), "MariaDB listening")
        dbd_conf = self.root / "etc" / "slurmdbd.conf"
        dbd_conf.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "DbdHost=localhost",
                    f"DbdPort={self.dbd_port}",
                    "SlurmUser=root",
                    f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
                    f"LogFile={self.root / 'log' / 'slurmdbd.log'}",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.db_port}",
                    "StorageUser=root",
                    f"StorageLoc=slurm_acct_{self.name}",
                    "",
                ]
            )
        )
        dbd_conf.chmod(0o600)
        self._write_slurm_conf()  # slurmdbd reads the folder of SLURM_CONF
        self._spawn("slurmdbd", "slurmdbd", "-D")
        self._until(lambda: self._listening(self.dbd_port), "slurmdbd listening")
        self.run("sacctmgr", "-i", "add", "cluster", self.name)

    @staticmethod
    def _listening(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def _write_slurm_conf(self) -> None:
        root = self.root
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "SlurmdParameters=config_overrides",  # the node line's CPUs, not the machine's
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            # Without it a job that names no memory takes the whole node.
            "DefMemPerCPU=1024",
            "ReturnToService=2",
            "MinJobAge=600",
            "JobRequeue=1",
            "KillWait=2",  # seconds from a cancel's SIGTERM to its SIGKILL
            "SchedulerParameters=sched_interval=2",
            (
                "AccountingStorageType=accounting_storage/slurmdbd\n"
                f"AccountingStorageHost=localhost\nAccountingStoragePort={self.dbd_port}\n"
                # the munge socket of connections to slurmdbd
                f"AccountingStoragePass={self.munge_socket}"
                if self.accounting
                else "AccountingStorageType=accounting_storage/none"
            ),
            node_line(self.hostname),
            f"PartitionName={PARTITION} Nodes={self.hostname} Default=YES MaxTime=INFINITE "
            "State=UP",
            f"PartitionName={SHORT_PARTITION} Nodes={self.hostname} "
            f"MaxTime={SHORT_PARTITION_MAX_MIN} State=UP",
            "",
        ]
        self.conf.write_text("\n".join(lines))

    def _node_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).split()
        return bool(states) and all(state == "idle" for state in states)

    # Stop

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job of the cluster and wait until none runs."""
        if "slurmctld" not in self.processes:
            return
        self.run("scancel", "--user", str(os.getuid()), check=False)
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%i", check=False).strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop exactly the processes :meth:`start` started, jobs first."""
        self.cancel_all()
        # Slurm's daemons together (slurmctld takes seconds to exit), the services they use after.
        for names in (("slurmd", "slurmctld"), ("slurmdbd",), ("mariadbd", "munged")):
            running = [self.processes.pop(n) for n in names if n in self.processes]
            for process in running:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in running:
                try:
                    process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if getattr(self, "socket_dir", None) is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def start_cluster(root: Path, accounting: bool) -> SlurmCluster:
    """Install what is missing (when allowed) and start a cluster under ``root``."""
    if os.geteuid() != 0:
        raise ClusterUnavailable("the test cluster runs slurmctld and slurmd as root")
    install(accounting)
    cluster = SlurmCluster(root, accounting)
    try:
        cluster.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        raise ClusterUnavailable(f"starting it failed: {error}") from error
    return cluster


def array_tasks(cluster: SlurmCluster) -> dict[str, dict[str, str]]:
    """Every job the controller lists (ended ones included) by array job id: task id -> state
    (task id ``N/A`` for a job that is not an array)."""
    arrays: dict[str, dict[str, str]] = {}
    for line in cluster.run("squeue", "-h", "-r", "-t", "all", "-o", "%F|%K|%T").splitlines():
        array_id, task_id, state = line.split("|")
        arrays.setdefault(array_id, {})[task_id] = state
    return arrays


def preempt(cluster: SlurmCluster, job_id: str) -> None:
    """Pre-empt a running job the way submitit expects it (``SlurmJob._interrupt``): SIGTERM,
    then submitit's USR2, to the job's steps; then let the requeued job start at once
    (Slurm holds a requeued job for two minutes)."""
    cluster.run("scancel", "--signal=TERM", job_id)
    # scancel may retry its TERM 5 s later ("Job can not be altered now"): let it land before
    # the USR2, or it kills the `scontrol requeue` that submitit's USR2 handler runs.
    time.sleep(1)
    cluster.run("scancel", "--signal=USR2", job_id)
    deadline = time.monotonic() + 30
    while cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").strip() != "PENDING":
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} was not requeued within 30 s")
        time.sleep(0.2)
    # slurmd refuses a job whose credential dates from the second its old one was revoked in
    # ("Job credential revoked"): the requeued job starts a second later at the earliest.
    time.sleep(1.1)
    cluster.run("scontrol", "update", f"jobid={job_id}", "StartTime=now")
