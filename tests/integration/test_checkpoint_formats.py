"""Checkpoint freshness for a user's own command (chaos.ckptformat): a plain DDP script that
saves with ``torch.save`` and reports each save's path through the probe is judged, not left
``unknown``: an honest one passes through a rank kill and its restart; one that writes the
weights of the next step under the step it claims (NeMo-RL #3312's pattern) fails it, and
only it, naming the step each checkpoint really holds."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from tests.integration._support import cli_env, run_trainchaos

pytestmark = [pytest.mark.integration]

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from chaos import probe

    STEPS, EVERY = 20, 5
    late = "--late" in sys.argv  # the bug: save step N's checkpoint after step N+1's update
    root = os.path.join(sys.argv[1], os.environ["TRAINCHAOS_RUN_ID"])  # the twin's apart
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    probe.emit("rank_start", rank=rank, world_size=dist.get_world_size(), pid=os.getpid(),
               node=int(os.environ["TRAINCHAOS_NODE"]))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(root, exist_ok=True)
    step = 0
    saved = sorted(int(n[5:-3]) for n in os.listdir(root) if n.startswith("step-") and n.endswith(".pt"))
    if saved:
        path = os.path.join(root, f"step-{saved[-1]}.pt")
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=path)

    def save(claimed):
        path = os.path.join(root, f"step-{claimed}.pt")
        probe.emit("ckpt_save_start", step=claimed, tier="shared", path=path)
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": claimed},
                   path + ".tmp")
        os.replace(path + ".tmp", path)
        probe.emit("ckpt_save_end", step=claimed, tier="shared", path=path)

    pending = None
    while step < STEPS:
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
            if pending is not None:
                save(pending)
                pending = None
            if step % EVERY == 0:
                if late and step < STEPS:
                    pending = step
                else:
                    save(step)
        time.sleep(0.05)
    if rank == 0:
        probe.final_state(step, model=model)
    dist.destroy_process_group()
    """
)


def _run(tmp_path, name: str, args: str, faults: list[dict]) -> tuple[int, dict, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": name, "seed": 3,
        "workload": {"command": f"python {script} {tmp_path / 'ckpt'} {args}".strip(), "steps": 20},
        "topology": {"nodes": 1, "ranks_per_node": 2},
        "baseline": True,
        "faults": faults,
        "targets": {"stale_checkpoints": {"max": 0}, "final_state": "matches_baseline"},
        "timeout_s": 120,
    }))
    out = tmp_path / "reports"
    proc = run_trainchaos(["run", str(scenario), "--out", str(out)], env=cli_env(tmp_path / "state"), timeout=230)
    journal = json.loads((out / name / "0" / "journal.json").read_text())
    return proc.returncode, journal, proc.stdout + proc.stderr


@pytest.mark.timeout(240)
def test_a_command_saving_with_torch_save_is_judged_fresh_through_a_restart(tmp_path):
    code, journal, output = _run(tmp_path, "user-ckpt-fresh", "",
                                 [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 12}}])
    assert code == 0, output
    metrics = journal["metrics"]
    assert journal["status"] == "completed", journal["error"]
    assert [r["resumed_from"] for r in metrics["restarts"]] == [10], metrics["restarts"]  # it loaded one
    # Read by the torch.save format: 5 and 10 before the kill, 15 and 20 after the resume.
    assert metrics["stale_checkpoints"] == 0
    assert metrics["checked_checkpoints"] == 4 and metrics["unchecked_checkpoints"] == 0, metrics
    assert all(c["ok"] for c in journal["verdict"]["checks"]), journal["verdict"]


@pytest.mark.timeout(240)
def test_a_command_saving_the_next_steps_weights_fails_freshness_and_only_it(tmp_path):
    code, journal, output = _run(tmp_path, "user-ckpt-late", "--late", [])
    assert code == 1, output  # a target missed
    metrics = journal["metrics"]
    assert metrics["checked_checkpoints"] == 4, metrics
    assert [(i["step"], i["holds_step"]) for i in metrics["stale_checkpoint_list"]] == [(5, 6), (10, 11), (15, 16)]
    assert metrics["digest_match"] is True  # nothing was loaded: the final weights are the twin's
    failed = [c["name"] for c in journal["verdict"]["checks"] if not c["ok"]]
    assert failed == ["stale_checkpoints"], journal["verdict"]
