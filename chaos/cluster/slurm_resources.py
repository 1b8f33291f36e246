"""What a Slurm run leaves on the cluster, as run-scoped resources: the job trainchaos
submitted (``slurm_job``), the step it started in someone's allocation (``slurm_step``) and
a node it took out of service (``slurm_node_state``). Each is found again by its name or
reason alone (``scan``), so ``trainchaos cleanup`` undoes it without a journal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any, ClassVar

from chaos.cluster.slurm_cli import (
    NODE_REASON_PREFIX,
    PREFIX,
    node_out_of_service,
    resume_node,
    set_node_state,
    slurm,
)
from chaos.errors import ToolError
from chaos.runfiles.resources import HelperProcess, Leftover, ResourceKind, register_kind

__all__ = ["SlurmJob", "SlurmNodeState", "SlurmStep"]


@register_kind
class SlurmJob(ResourceKind):
    """A job trainchaos submitted: named by the run id, so that even a submission whose
    job id never reached the journal is found (``scancel --name``)."""

    kind: ClassVar[str] = "slurm_job"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        env = {**os.environ, **spec.get("env", {})}
        try:
            result = subprocess.run(spec["argv"], env=env, capture_output=True, text=True, timeout=30,
                                    stdin=subprocess.DEVNULL, cwd=spec.get("cwd"))
        except subprocess.TimeoutExpired as exc:
            raise ToolError("sbatch did not answer in 30 s") from exc
        if result.returncode != 0:
            raise ToolError(f"sbatch refused the job: {(result.stderr or result.stdout).strip()}")
        return {"job_id": result.stdout.strip().split(";")[0]}

    @classmethod
    def _ids(cls, spec: dict[str, Any], details: dict[str, Any]) -> list[str]:
        result = slurm(["squeue", "-h", f"--name={spec['name']}", "-o", "%i|%T"], spec.get("slurm_conf"))
        return [line.split("|")[0] for line in result.stdout.split() if line.strip()]

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        conf = spec.get("slurm_conf")
        if not spec.get("name", "").startswith(PREFIX):
            return
        slurm(["scancel", f"--name={spec['name']}"], conf)
        if details.get("job_id"):
            slurm(["scancel", details["job_id"]], conf)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cls.exists(spec, details):
            time.sleep(0.2)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return bool(cls._ids(spec, details))

    @classmethod
    def scan(cls) -> list[Leftover]:
        if shutil.which("squeue") is None:
            return []
        result = slurm(["squeue", "-h", "-o", "%i|%j"], timeout=5)
        found = []
        for line in result.stdout.splitlines() if result.returncode == 0 else []:
            job_id, _, name = line.strip().partition("|")
            if name.startswith(PREFIX):
                found.append(Leftover(cls.kind, f"job {job_id} ({name})", name,
                                      {"name": name, "slurm_conf": os.environ.get("SLURM_CONF")}))
        return found


@register_kind
class SlurmStep(ResourceKind):
    """A job step trainchaos started in someone's allocation (``jobid``): the ``srun``
    client runs on the controller, the step is named by the run id. Undoing it cancels that
    step only (``scancel JOB.STEP``), never the allocation."""

    kind: ClassVar[str] = "slurm_step"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        details = HelperProcess.create(run_id, {**spec, "name": spec["name"]})
        return {**details, "job_id": str(spec["job_id"])}

    @classmethod
    def _steps(cls, spec: dict[str, Any]) -> list[str]:
        result = slurm(["squeue", "-h", "-s", "-j", str(spec["job_id"]), "-o", "%i|%j"], spec.get("slurm_conf"))
        return [line.split("|")[0] for line in result.stdout.split()
                if line.strip() and line.split("|")[-1] == spec["name"]]

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        if not spec.get("name", "").startswith(PREFIX):
            return
        for step in cls._steps(spec):
            if "." in step:  # JOB.STEP: never the allocation itself
                slurm(["scancel", step], spec.get("slurm_conf"))
        HelperProcess.destroy(spec, details)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cls._steps(spec):
            time.sleep(0.2)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return bool(cls._steps(spec)) or HelperProcess.exists(spec, details)


@register_kind
class SlurmNodeState(ResourceKind):
    """A node trainchaos took out of service (DOWN, DRAIN), its reason
    ``trainchaos:<run id>:<fault>``. The faults keep their own record in the fault journal
    (reverted there); this kind is what ``cleanup`` finds by the reason alone."""

    kind: ClassVar[str] = "slurm_node_state"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        set_node_state(spec["node"], spec["state"], f"{NODE_REASON_PREFIX}{run_id}:{spec.get('why', '')}",
                       spec.get("slurm_conf"))
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        resume_node(spec["node"], spec.get("slurm_conf"))

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return node_out_of_service(spec["node"], spec.get("slurm_conf"))

    @classmethod
    def scan(cls) -> list[Leftover]:
        if shutil.which("sinfo") is None:
            return []
        result = slurm(["sinfo", "-h", "-N", "-R", "-o", "%N|%E"], timeout=5)
        found = []
        for line in result.stdout.splitlines() if result.returncode == 0 else []:
            name, _, reason = line.strip().partition("|")
            if reason.startswith(NODE_REASON_PREFIX):
                run_id = reason[len(NODE_REASON_PREFIX):].split(":")[0]
                found.append(Leftover(cls.kind, f"node {name} ({reason})", run_id,
                                      {"node": name, "slurm_conf": os.environ.get("SLURM_CONF")}))
        return found
