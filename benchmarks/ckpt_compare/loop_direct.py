"""ckpt-chaos's ``loop_ddp`` target (strategy ``direct``, one rank) as a script trainchaos can
run, for ``benchmarks/ckpt_chaos_compare.py``: the same save protocol, written here, not
copied. Every 5 steps it writes straight into ``step-N/`` (``model.pt``, ``optim.pt``,
``rank_0.pt``, then ``state.json`` last; the target names the folder ``checkpoint-N``, which
trainchaos's save window does not match), and the resume takes the highest-numbered folder
with no completeness check. SGD with momentum on an 8-16-1 MLP, 30 steps, as the target.
``--tmp-rename``: the target's ``tmp_rename_rank0`` strategy instead (written into
``step-N.tmp/``, then renamed into place: right for a process crash, no fsync anywhere)."""

from __future__ import annotations

import json
import os
import re
import time

import torch
from _cli import cadence_parser  # this folder: the script's own, on sys.path

from chaos import probe


def main() -> None:
    parser = cadence_parser()
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--tmp-rename", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    probe.emit("rank_start", rank=0, world_size=1, pid=os.getpid(), node=int(os.environ.get("TRAINCHAOS_NODE", 0)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    found = [int(m.group(1)) for name in os.listdir(args.out) if (m := re.fullmatch(r"step-(\d+)", name))]
    if found:
        folder = os.path.join(args.out, f"step-{max(found)}")  # no completeness check
        model.load_state_dict(torch.load(os.path.join(folder, "model.pt"), weights_only=True))
        opt.load_state_dict(torch.load(os.path.join(folder, "optim.pt"), weights_only=True))
        torch.load(os.path.join(folder, "rank_0.pt"), weights_only=True)
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as fh:
            step = int(json.load(fh)["step"])
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=folder)
    while step < args.steps:
        step += 1
        gen = torch.Generator().manual_seed(1000 * step)
        x = torch.randn(16, 8, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step_end(step, loss.item())
        probe.state_digest(step, model=model)
        if step % args.every == 0:
            final = os.path.join(args.out, f"step-{step}")
            folder = final + ".tmp" if args.tmp_rename else final
            probe.emit("ckpt_save_start", step=step, tier="shared", path=final)
            os.makedirs(folder, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
            torch.save(opt.state_dict(), os.path.join(folder, "optim.pt"))
            torch.save({"step": step}, os.path.join(folder, "rank_0.pt"))
            with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as fh:
                json.dump({"step": step}, fh)
            if args.tmp_rename:
                os.rename(folder, final)
            probe.emit("ckpt_save_end", step=step, tier="shared", path=final)
        time.sleep(args.sleep)
    probe.final_state(step, model=model)


if __name__ == "__main__":
    main()
