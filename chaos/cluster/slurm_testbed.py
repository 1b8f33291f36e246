"""A real Slurm cluster on this one machine, for tests and demos: munge, slurmctld and one
slurmd per emulated node, every file under a run directory of its own, every daemon stopped
afterwards.

Each emulated node is ``NodeHostname=localhost`` with a port of its own (``slurmd -N nX``), so
``srun`` runs every task here and trainchaos's ``slurm`` backend can be tested end to end
without a cluster. Nothing here touches the machine's own Slurm or munge: the configuration,
the munge key and socket, the state, spool, log and pid files all live under
``<tmp>/trainchaos-slurm-XXXX``; daemons are found again by a marker in their environment
(``TRAINCHAOS_SLURM_TESTBED=<dir>``), which the job steps slurmd forks inherit too.

    python -m chaos.cluster.slurm_testbed run --nodes 4 -- trainchaos run scenarios/slurm

starts it, runs the command with ``SLURM_CONF`` set, and stops everything, also when the
command fails or is interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from chaos import contract

__all__ = ["SlurmTestbed", "missing_binaries", "running_testbed"]

PARTITION = "trainchaos"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}")]


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class SlurmTestbed:
    """``start()`` then ``stop()`` (or ``with SlurmTestbed(...) as bed``)."""

    nodes: int = 4
    base_dir: str | None = None
    root: str = ""
    conf: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, trainchaos) needs to talk to this cluster."""
        return {"SLURM_CONF": self.conf}

    def __enter__(self) -> SlurmTestbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- start -------------------------------------------------------------------------
    def start(self, ready_timeout_s: float = 30.0) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local Slurm testbed runs its daemons as root (SlurmUser=root)")
        missing = missing_binaries()
        if missing:
            raise RuntimeError(f"Slurm/munge binaries missing: {', '.join(missing)} "
                               "(apt-get install slurm-wlm munge)")
        self.root = tempfile.mkdtemp(prefix="trainchaos-slurm-", dir=self.base_dir)
        # The daemons traverse it; the munge key is 0400 inside.
        os.chmod(self.root, 0o755)  # nosec B103
        try:
            self._start(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, ready_timeout_s: float) -> None:
        r = self.root
        for sub in ("munge", "state", "spool", "log", "run"):
            os.makedirs(os.path.join(r, sub), mode=0o700 if sub == "munge" else 0o755, exist_ok=True)
        key = os.path.join(r, "munge", "munge.key")
        with open(key, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(r, "munge", "munge.socket")
        self._spawn([_which("munged"), "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                     f"--pid-file={r}/run/munged.pid", f"--log-file={r}/log/munged.log",
                     f"--seed-file={r}/munge/munged.seed"], "munged")
        _wait(lambda: os.path.exists(sock), 10, "munged did not create its socket")
        ctld_port, *node_ports = _free_ports(1 + self.nodes)
        self.conf = os.path.join(r, "slurm.conf")
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write(self._config(sock, ctld_port, node_ports))
        self._spawn([_which("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
        _wait(lambda: self._client(["scontrol", "ping"]).returncode == 0 and
              "UP" in self._client(["scontrol", "ping"]).stdout, ready_timeout_s,
              "slurmctld did not answer scontrol ping")
        for name in self.node_names:
            self._spawn([_which("slurmd"), "-D", "-N", name, "-f", self.conf], f"slurmd-{name}")
        _wait(self._all_idle, ready_timeout_s, "the emulated nodes did not all become idle")

    def _config(self, sock: str, ctld_port: int, node_ports: list[int]) -> str:
        r = self.root
        lines = [
            "# written by chaos.cluster.slurm_testbed: a throwaway cluster on localhost",
            "ClusterName=trainchaos",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire also sets how long a requeued job waits before it may start again
            # (120 s by default): 5 s keeps a requeue scenario short.
            f"AuthInfo=socket={sock},cred_expire=5",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/linear",
            "SchedulerType=sched/builtin",
            # The main loop looks at pending jobs every 60 s by default: a requeued job whose
            # BeginTime passed would wait for it.
            "SchedulerParameters=sched_interval=1",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SlurmdParameters=config_overrides",
            # 1, not 2: a node an operator (or trainchaos) set DOWN stays down until RESUMEd,
            # as on production clusters; 2 would return it at its slurmd's next registration.
            "ReturnToService=1",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "KillWait=3",
            "MinJobAge=30",
            "MessageTimeout=5",
        ]
        for name, port in zip(self.node_names, node_ports, strict=True):
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                         "CPUs=4 RealMemory=1000 State=UNKNOWN")
        lines.append(f"PartitionName={PARTITION} Nodes={','.join(self.node_names)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _spawn(self, argv: list[str], name: str) -> None:
        env = {**os.environ, contract.SLURM_TESTBED_ENV: self.root}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        log = open(os.path.join(self.root, "log", f"{name}.out"), "ab")  # noqa: SIM115
        try:
            self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))
        finally:
            log.close()

    def _client(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, env={**os.environ, "SLURM_CONF": self.conf}, capture_output=True,
                                  text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", "timed out")

    def _all_idle(self) -> bool:
        out = self._client(["sinfo", "-h", "-N", "-o", "%N %T"])
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return out.returncode == 0 and all(states.get(n) == "idle" for n in self.node_names)

    # -- stop --------------------------------------------------------------------------
    def stop(self, grace_s: float = 5.0) -> None:
        """Cancel every job, stop every daemon and every process they forked; remove the
        directory. Safe to call twice, and after a failed start."""
        if self.conf and os.path.exists(self.conf) and self.procs:
            self._client(["scancel", "--full", f"--partition={PARTITION}"])
        for proc in reversed(self.procs):  # slurmds, then slurmctld, then munged
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.05)
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self.root:
            for pid in testbed_processes(self.root):  # slurmstepd and whatever it forked
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _wait(lambda: not testbed_processes(self.root), 10, "testbed processes survived SIGKILL",
                  raise_=False)
            shutil.rmtree(self.root, ignore_errors=True)
        self.procs = []

    def processes(self) -> list[int]:
        return testbed_processes(self.root) if self.root else []


def testbed_processes(root: str | None = None) -> list[int]:
    """Live processes of a testbed (``root``, or any): the daemons carry the marker;
    slurmstepd (which slurmd starts with a cleaned environment) and the job's processes carry
    the testbed's ``SLURM_CONF``."""
    needle = f"{contract.SLURM_TESTBED_ENV}={root}".encode() if root else f"{contract.SLURM_TESTBED_ENV}=".encode()
    conf = f"SLURM_CONF={root}/slurm.conf".encode() if root else None
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        ours = any(item == needle or item == conf or (not root and item.startswith(needle)) for item in env)
        if not root and not ours:
            ours = any(item.startswith(b"SLURM_CONF=") and b"/trainchaos-slurm-" in item for item in env)
        if state != b"Z" and ours:
            found.append(int(name))
    return found


def _wait(cond, timeout_s: float, message: str, raise_: bool = True) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    if raise_:
        raise RuntimeError(message)
    return False


@contextlib.contextmanager
def running_testbed(nodes: int = 4) -> Iterator[SlurmTestbed]:
    bed = SlurmTestbed(nodes=nodes)
    try:
        bed.start()
        yield bed
    finally:
        bed.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.cluster.slurm_testbed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="start the cluster, run COMMAND with SLURM_CONF set, stop it")
    run.add_argument("--nodes", type=int, default=4)
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = [a for a in args.command if a != "--"] or ["sinfo"]
    # SIGTERM (a CI job cancelled) must still stop the daemons: turn it into an exception.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with running_testbed(args.nodes) as bed:
            print(f"local Slurm up: {bed.nodes} nodes, SLURM_CONF={bed.conf}", flush=True)
            return subprocess.run(command, env={**os.environ, **bed.env()}).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        print("local Slurm stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
