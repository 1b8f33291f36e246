"""The toy workload's job: one rank of a pretend training run, started by torchrun.

It trains nothing: each step sleeps, reports its end through ``chaos.probe`` and, every
``--resume-every`` steps, saves the step it reached to a file of its rank's own, from which a
restarted rank resumes. Rank 0 reports the end of training (``run_end``).
"""

from __future__ import annotations

import argparse
import os
import time

from chaos import contract, probe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--sleep", type=float, required=True)
    parser.add_argument("--resume-every", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    probe.emit("rank_start", rank=rank, local_rank=int(os.environ["LOCAL_RANK"]),
               world_size=int(os.environ["WORLD_SIZE"]), node=int(os.environ.get(contract.NODE_ENV, "0")),
               pid=os.getpid(), stack="toy_workload")
    resume = os.path.join(args.state_dir, f"toy-resume-{rank}.txt")
    step = int(open(resume).read()) if os.path.exists(resume) else 0
    while step < args.steps:
        step += 1
        probe.fault_point("step_begin", step=step)
        time.sleep(args.sleep)
        probe.step_end(step, loss=1.0 / step)
        if step % args.resume_every == 0:
            with open(resume + ".tmp", "w") as fh:
                fh.write(str(step))
            os.replace(resume + ".tmp", resume)
    if rank == 0:
        probe.final_state(step, loss=1.0 / step)
    probe.emit("rank_exit", code=0, reason="completed")


if __name__ == "__main__":
    main()
