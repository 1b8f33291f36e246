"""Storage faults and the crash-point sweep on a user's own ``command`` workload: a plain DDP
script of the test's own, saving with ``torch.save`` into the checkpoint directory the
workload declares (``$TRAINCHAOS_CKPT_DIR``, ``{ckpt_dir}``), with the FUSE fault layer
mounted over it. EIO on its writes reaches its saves (the layer counts the hits; the script
surfaces the failures; a later save succeeds), and ``run --crash-points`` loses power at
durability boundaries of one of its saves and audits each crash image by the torch.save format:
a save that fsyncs before its rename survives every power loss, one that does not leaves its
checkpoints torn; a save straight to the final name (no fsync, no rename: no boundary at all)
gets process-crash points, and its torn file is flagged. Nothing is left mounted after any."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from chaos.cluster.mounts import fuse_mounts
from chaos.contract import STORAGE_RUN_ID_ENV
from chaos.runfiles.events import read_events
from chaos.storage.control import read_json
from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, run_trainchaos

pytestmark = [pytest.mark.integration, pytest.mark.fuse]

SCRIPT = textwrap.dedent(
    """
    import argparse, os, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from chaos import probe

    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)  # {ckpt_dir}
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, required=True)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--fsync", action="store_true")  # make each save durable before its rename
    parser.add_argument("--direct", action="store_true")  # save straight to the final name
    args = parser.parse_args()
    assert args.ckpt == os.environ["TRAINCHAOS_CKPT_DIR"], "the declared directory, both ways"
    root = args.ckpt
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    probe.emit("rank_start", rank=rank, world_size=dist.get_world_size(), pid=os.getpid(),
               node=int(os.environ["TRAINCHAOS_NODE"]))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(root, exist_ok=True)
    step = 0
    # Newest first; a checkpoint that does not load (torn by a power loss) is passed over.
    names = [n for n in os.listdir(root) if n.startswith("step-") and n.endswith(".pt")]
    for name in sorted(names, key=lambda n: -int(n[5:-3])):
        path = os.path.join(root, name)
        try:
            state = torch.load(path)
        except Exception:
            continue
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=path)
        break

    def save(step):
        path = os.path.join(root, f"step-{step}.pt")
        probe.emit("ckpt_save_start", step=step, tier="shared", path=path)
        try:
            state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}
            if args.direct:  # the classic bug: no temporary name, no fsync, no rename
                torch.save(state, path)
                probe.emit("ckpt_save_end", step=step, tier="shared", path=path)
                return
            torch.save(state, path + ".tmp")
            if args.fsync:
                fd = os.open(path + ".tmp", os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(path + ".tmp", path)
        except Exception as exc:  # a failed save is reported and training goes on without it
            probe.emit("ckpt_save_failed", step=step, tier="shared", error=str(exc), abandoned=True)
            return
        probe.emit("ckpt_save_end", step=step, tier="shared", path=path)

    while step < args.steps:
        step += 1
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 4, generator=gen)
        loss = ((model(x) - x[:, :2].sin()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step_end(step, loss.item())
        if rank == 0:
            probe.state_digest(step, model=model)  # the twin's reference, a no-op elsewhere
            if step % args.every == 0:
                save(step)
        time.sleep(args.sleep)
    if rank == 0:
        probe.final_state(step, model=model)
    dist.destroy_process_group()
    """
)


def _daemons_of(run_id: str) -> list[int]:
    needle = f"{STORAGE_RUN_ID_ENV}={run_id}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _assert_nothing_left(run_id: str) -> None:
    assert not [m for m in fuse_mounts() if m[0].startswith(run_id)], "a fault-layer mount was left"
    assert not _daemons_of(run_id), "a fault-layer daemon was left"
    assert not find_run_processes(run_id), "processes of the run left behind"


def _scenario(tmp_path, name: str, args: str, steps: int, every: int, **extra) -> str:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "seed": 5,
        "workload": {"command": f"python {script} --ckpt {{ckpt_dir}} --steps {steps} --every {every} {args}".strip(),
                     "steps": steps, "checkpoint_dir": "ckpt", "checkpoint_every_steps": every},
        "topology": {"nodes": 1, "ranks_per_node": 2},
        "timeout_s": 120, **extra,
    }))
    return str(path)


@pytest.mark.timeout(240)
def test_eio_on_a_commands_own_torch_save_hits_its_saves_and_a_later_save_succeeds(tmp_path):
    """EIO on every write to the declared checkpoint directory for 1.5 s from step 8: the
    saves in that window fail (the layer counts its hits on them), the script reports them,
    and a save after the window lands in the run's ``ckpt`` directory."""
    scenario = _scenario(tmp_path, "command-eio", "--sleep 0.1", steps=30, every=5, faults=[
        {"type": "io_error", "target": {"rank": 0}, "trigger": {"at_step": 8},
         "params": {"tier": "shared", "errno": "EIO", "ops": ["write"], "duration_s": 1.5}}],
        targets={"failed_saves": {"min": 1}})
    out = tmp_path / "reports"
    proc = run_trainchaos(["run", scenario, "--out", str(out)], env=cli_env(tmp_path / "state"), timeout=220)
    journal = json.loads((out / "command-eio" / "0" / "journal.json").read_text())
    _assert_nothing_left(journal["run_id"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert journal["status"] == "completed", journal["error"]
    run_dir = journal["run_dir"]
    # The layer was over the declared directory and its rule failed writes there.
    hits = (read_json(os.path.join(run_dir, "storage", "shared", "state.json")) or {}).get("hits", {})
    assert hits.get("f0-io_error", 0) >= 1, hits
    events = read_events(os.path.join(run_dir, "events"))
    failed = [e for e in events if e["kind"] == "ckpt_save_failed"]
    assert failed and journal["metrics"]["failed_saves"] == len(failed), failed
    assert all(e["error"] for e in failed)
    injected = next(e for e in events if e["kind"] == "fault_injected")
    reverted = next(e for e in events if e["kind"] == "fault_reverted")
    assert all(injected["t"] <= e["t"] <= reverted["t"] + 1 for e in failed), "a save failed outside the window"
    later = [e for e in events if e["kind"] == "ckpt_save_end" and e["t"] > reverted["t"]]
    assert later, "no save succeeded after the fault"
    assert {os.path.dirname(e["path"]) for e in later} == {os.path.join(run_dir, "ckpt")}
    assert os.path.getsize(later[-1]["path"]) > 0
    assert journal["verdict"]["passed"], journal["verdict"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fsync", "points"), [(True, "1,2"), (False, "1")], ids=["fsync", "no-fsync"])
def test_the_crash_point_sweep_of_a_commands_torch_save(tmp_path, fsync, points):
    """The save of step 20 (the second, by the declared cadence of 10): with an fsync before
    its rename a power loss at either boundary (one of each kind: the fsync, the rename)
    resumes from a complete checkpoint on the twin's weights; without it, a power loss after
    the rename leaves every checkpoint torn in the crash image and the restart starts over."""
    scenario = _scenario(tmp_path, "command-crash", "--fsync" if fsync else "", steps=30, every=10)
    out = tmp_path / "sweep"
    argv = ["run", "--crash-points", scenario, "--out", str(out), "--crash-after", points]
    proc = run_trainchaos(argv, env=cli_env(tmp_path / "state"), timeout=580)
    output = proc.stdout + proc.stderr
    sweep = json.loads((out / "command-crash" / "crash_points.json").read_text())
    for result in sweep["results"]:
        run_id = json.loads((Path(result["run_dir"]) / "journal.json").read_text())["run_id"]
        _assert_nothing_left(run_id)
    assert sweep["save_step"] == 20 and sweep["twin_status"] == sweep["trace_status"] == "completed", output
    boundaries = [(b["op"], b["path"]) for b in sweep["boundaries"]]
    rename = ("rename", "step-20.pt.tmp -> step-20.pt")
    assert boundaries == ([("fsync", "step-20.pt.tmp"), rename] if fsync else [rename]), boundaries
    results = {r["after"]: r for r in sweep["results"]}
    if fsync:
        assert proc.returncode == 0, output
        assert {k: r["outcomes"] for k, r in results.items()} == {1: ["ok"], 2: ["ok"]}, output
        # Audited by the torch.save format: after the fsync the step-20 file reads whole, but
        # as step-20.pt.tmp, which the script's loader never takes (nor the audit: a name of a
        # write in progress); only once renamed is it complete and loaded.
        assert {k: (r["complete"], r["torn"], r["resumed_from"]) for k, r in results.items()} == {
            1: ([10], {}, 10), 2: ([10, 20], {}, 20)}, output
        assert "2/2 boundaries ok" in proc.stdout
    else:
        assert proc.returncode == 1, output
        (result,) = results.values()
        assert result["after"] == 1 and result["resumed_from"] == 0, result
        # step 10 was reported saved long before, and is lost with step 20
        assert result["outcomes"] == ["torn", "lost_saved", "lost_interval"], result
        assert result["complete"] == [] and sorted(map(int, result["torn"])) == [10, 20], result
        assert "torn under a finished name: step 10, step 20" in proc.stdout


@pytest.mark.timeout(400)
def test_a_save_with_no_fsync_and_no_rename_gets_process_crash_points_and_its_torn_file_is_flagged(tmp_path):
    """``torch.save`` straight to ``step-20.pt``: no durability boundary at all (the power
    model has nothing to sweep), two file operations (its create and its close). A process
    crash before the create resumes from step 10, fine; one half-way through its bytes leaves
    a torn step-20.pt under its finished name (the script skips it: no loaded_torn)."""
    scenario = _scenario(tmp_path, "command-process", "--direct", steps=30, every=10)
    out = tmp_path / "sweep"
    argv = ["run", "--crash-points", scenario, "--out", str(out), "--crash-model", "process",
            "--crash-after", "b1,t2"]
    proc = run_trainchaos(argv, env=cli_env(tmp_path / "state"), timeout=380)
    output = proc.stdout + proc.stderr
    sweep = json.loads((out / "command-process" / "crash_points.json").read_text())
    for result in sweep["results"]:
        run_id = json.loads((Path(result["run_dir"]) / "journal.json").read_text())["run_id"]
        _assert_nothing_left(run_id)
    assert sweep["model"] == "process" and sweep["boundaries"] == [], output
    assert [(o["seq"], o["op"], o["path"]) for o in sweep["ops"]] == [
        (1, "create", "step-20.pt"), (2, "close", "step-20.pt")], output
    assert proc.returncode == 1, output
    results = {r["point"]: r for r in sweep["results"]}
    assert {p: (r["model"], r["outcomes"], r["resumed_from"]) for p, r in results.items()} == {
        "b1": ("process", ["ok"], 10), "t2": ("process", ["torn"], 10)}, output
    assert list(map(int, results["t2"]["torn"])) == [20] and results["t2"]["complete"] == [10], results["t2"]
    assert "1/2 crash points ok; problems at t2" in proc.stdout
