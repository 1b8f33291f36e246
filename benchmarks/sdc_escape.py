"""Where a quiet bit flip goes: detected, escaped into every replica, or healed. A study.

    python benchmarks/sdc_escape.py [--flips 24] [--model mlp] [--out reports/bench]

Two real ranks of the harness (its model, AdamW, DDP over gloo with the deterministic
all-reduce, its data sampler and LR schedule: the workload of ``scenarios/sdc/``) in one
launch. First a fault-free reference trajectory to ``--steps``; the state at the end of step
``--flip-step - 1`` is kept. Then, many times over, that state is restored on both ranks,
one bit of one element flips on rank 1 at step ``--flip-step``, and training goes on to
the last step. Every step records, bitwise, whether the two replicas differ:

- before the optimizer update: the parameters, the gradients (after the all-reduce), the
  optimizer state (exp_avg, exp_avg_sq) -- what the update reads;
- after the update: the parameters (what the sha256 digest hashes);
- the gradient norm of each rank (the shipped digest compares it every step).

Flips: each mantissa bit class (bit 0: one ulp; a middle bit; bit 22: the mantissa's top)
x each tensor kind (a weight at the start of the step; exp_avg, exp_avg_sq at the start of
the step; a gradient after the all-reduce, on one rank), at ``--flips`` seeded elements drawn
uniformly over all of the model's elements. From the per-step record each detector's
verdict is derived (the same flips judged by all of them):

- ``digest/k``: as shipped before issue 20 -- sha256 of the parameters after the update
  every k steps and at the last step (a checkpoint), plus the gradient norms every step;
- ``fingerprint:params``: digest/10 plus an exact checksum of the parameters' bits *before*
  the update, every step, and of everything the update reads on the steps that end in a
  checkpoint (every 10 here; the harness's default now, ``detect.fingerprint: params``);
- ``fingerprint:update``: the same over everything the update reads (``detect.fingerprint:
  update``: parameters, gradients, optimizer state).

Outcomes: *detected* (some check saw the replicas differ), *escaped* (never seen, and the
final parameters differ from the reference: every replica left the fault-free trajectory
together) and *healed* (never seen, final parameters bitwise equal to the reference). The
exact checksums are also checked against the sha256 ground truth: at the first step a part
differs (one element then) they must never miss (``fingerprint_first_divergence_misses``);
later, when many elements differ by an ulp or two, a sum can cancel, and how often is counted. A few control trials restore and train without a flip:
they must all end equal to the reference, or the restore is not exact and nothing here holds.
Seeded and deterministic on one machine; what differs between machines is the floating-point
rounding, which is what this measures. Takes about 3 minutes on 2 quiet cores (the mlp, 24 flips
per cell: 291 trials of 38 steps).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import hashlib
import json
import multiprocessing
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time

BITS = {"low (bit 0)": 0, "middle (bit 11)": 11, "high (bit 22)": 22}
KINDS = ("weight", "exp_avg", "exp_avg_sq", "grad")
"""weight / optimizer state: flipped at the start of the step; grad: after the all-reduce,
on rank 1 only (before the gradient norm and the update, as the probe's after_backward)."""
CADENCES = (1, 2, 5, 10)
CHECKPOINT_EVERY = 10
COLUMNS = ("pre_params", "pre_grads", "pre_optim", "post_params", "norm")
FP_COLUMNS = ("fp_params", "fp_grads", "fp_optim")


def _sha_words(tensors) -> list[float]:
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(t.detach().contiguous().reshape(-1).view(-1).numpy().tobytes())
    raw = digest.digest()
    return [float(int.from_bytes(raw[i * 6:(i + 1) * 6], "big")) for i in range(4)]


def _worker(rank: int, port: int, run_dir: str, args: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank), TRAINCHAOS_NODE=str(rank),
                      OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from chaos.probe.bitflip_bits import flip_
    from harness.config_load import config_from_mapping
    from harness.dist import DistEnv
    from harness.sdc import update_fingerprint, words_of
    from harness.train import Trainer

    cfg = config_from_mapping({
        "steps": args["steps"], "run_dir": run_dir, "seed": args["seed"], "model": {"name": args["model"]},
        "checkpoint": {"every_steps": 0, "mode": "sync", "keep": 2}, "failure": {"watchdog_s": 0},
        # The study records its own evidence; the harness's detectors would stop the run.
        "detect": {"nonfinite": False, "spike": False, "digest_every": 0, "golden_every": 0,
                   "fingerprint": "off"}})
    trainer = Trainer(cfg, DistEnv.from_env())
    trainer.setup()
    model, optimizer = trainer.raw_model, trainer.optimizer
    params = [p for _, p in sorted(model.named_parameters())]
    sizes = [p.numel() for p in params]
    total = sum(sizes)
    pending: dict = {}
    evidence: dict = {}

    def optim_tensors():
        return [optimizer.state[p][key] for p in params for key in ("exp_avg", "exp_avg_sq")
                if p in optimizer.state]

    def locate(index: int):
        for p, size in zip(params, sizes, strict=True):
            if index < size:
                return p, index
            index -= size
        raise IndexError(index)

    def before_update(_optimizer, _args, _kwargs):
        if pending.get("kind") == "grad" and rank == 1:
            p, i = locate(pending.pop("element"))
            flip_(p.grad, i, pending.pop("bit"))
            pending.clear()
        grads = [p.grad for p in params]
        evidence["pre"] = (_sha_words(params) + _sha_words(grads) + _sha_words(optim_tensors())
                           + [float(torch.nn.utils.get_total_norm(grads))])
        fp = update_fingerprint(params, [g for g in grads if g is not None], optim_tensors())
        evidence["fp"] = [w for value in fp for w in words_of(value)]

    optimizer.register_step_pre_hook(before_update)

    def one_step() -> list[float]:
        trainer.train_step(verify=False)
        trainer.step += 1
        row = evidence["pre"][:12] + _sha_words(params) + evidence["pre"][12:] + evidence["fp"]
        table = [torch.zeros(len(row), dtype=torch.float64) for _ in range(2)]
        dist.all_gather(table, torch.tensor(row, dtype=torch.float64))
        return [t.tolist() for t in table]

    flip_step, steps = args["flip_step"], args["steps"]
    snapshot = None
    t0 = time.perf_counter()
    while trainer.step < steps:
        if trainer.step == flip_step - 1:
            snapshot = copy.deepcopy(trainer._state())
        one_step()
    reference = _sha_words(params)
    reference_s = time.perf_counter() - t0

    trials = [{"kind": "control", "bit": None, "element": None} for _ in range(args["controls"])]
    for kind in KINDS:
        for label, bit in BITS.items():
            for n in range(args["flips"]):
                rng = random.Random(f"{args['seed']}/{kind}/{bit}/{n}")
                trials.append({"kind": kind, "bit": bit, "bit_class": label, "element": rng.randrange(total)})
    records = []
    for trial in trials:
        trainer._restore(copy.deepcopy(snapshot))
        flips = []
        for step in range(flip_step, steps + 1):
            if step == flip_step and trial["kind"] != "control" and rank == 1:
                if trial["kind"] == "grad":
                    pending.update(kind="grad", element=trial["element"], bit=trial["bit"])
                else:
                    p, i = locate(trial["element"])
                    tensor = p if trial["kind"] == "weight" else optimizer.state[p][trial["kind"]]
                    before, after = flip_(tensor, i, trial["bit"])
                    flips.append((before, after))
            table = one_step()
            differ = _differences(table)
            for name in COLUMNS + FP_COLUMNS:
                trial.setdefault(name, [])
                if differ[name]:
                    trial[name].append(step)
        trial["final_equal"] = _sha_words(params) == reference
        records.append(trial)
    if rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"records": records, "reference_s": reference_s}, fh)
    dist.barrier()
    os._exit(0)


def _differences(table: list[list[float]]) -> dict[str, bool]:
    a, b = table
    spans = {"pre_params": (0, 4), "pre_grads": (4, 8), "pre_optim": (8, 12), "post_params": (12, 16),
             "norm": (16, 17), "fp_params": (17, 19), "fp_grads": (19, 21), "fp_optim": (21, 23)}
    return {name: a[lo:hi] != b[lo:hi] for name, (lo, hi) in spans.items()}


# --------------------------------------------------------------------------- verdicts


def detection_step(trial: dict, detector: str, flip_step: int, steps: int) -> int | None:
    """The first step at which ``detector`` sees the replicas differ, or None."""
    seen = set(trial["norm"])  # every variant compares the gradient norms every step
    if detector.startswith("digest/"):
        k = int(detector.split("/")[1])
    else:
        k = CHECKPOINT_EVERY
        seen |= set(trial["pre_params"])
        everything = set(trial["pre_grads"]) | set(trial["pre_optim"])
        if detector == "fingerprint:update":
            seen |= everything
        else:  # the whole update input on the steps that end in a checkpoint
            seen |= {s for s in everything if s % CHECKPOINT_EVERY == 0 or s == steps}
    seen |= {s for s in trial["post_params"] if s % k == 0 or s == steps}
    after = [s for s in seen if s >= flip_step]
    return min(after) if after else None


DETECTORS = tuple(f"digest/{k}" for k in CADENCES) + ("fingerprint:params", "fingerprint:update")


def summarize(records: list[dict], flip_step: int, steps: int) -> dict:
    controls = [r for r in records if r["kind"] == "control"]
    flips = [r for r in records if r["kind"] != "control"]
    cells: dict = {}
    for r in flips:
        cells.setdefault((r["kind"], r["bit_class"]), []).append(r)
    summary = []
    for (kind, bit_class), trials in cells.items():
        row = {"kind": kind, "bit_class": bit_class, "n": len(trials),
               "replicas_diverged_pct": _pct(sum(bool(set(t["post_params"]) | set(t["pre_optim"])) or not t["final_equal"]
                                        for t in trials), len(trials))}
        for det in DETECTORS:
            found = [detection_step(t, det, flip_step, steps) for t in trials]
            detected = [s for s in found if s is not None]
            escaped = sum(1 for t, s in zip(trials, found, strict=True) if s is None and not t["final_equal"])
            healed = sum(1 for t, s in zip(trials, found, strict=True) if s is None and t["final_equal"])
            first_ckpt = (flip_step // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY
            late = sum(1 for s in detected if s > first_ckpt)
            row[det] = {"detected_pct": _pct(len(detected), len(trials)), "escaped_pct": _pct(escaped, len(trials)),
                        "healed_pct": _pct(healed, len(trials)),
                        "median_steps_to_detect": statistics.median(s - flip_step for s in detected) if detected else None,
                        "detected_after_a_checkpoint_pct": _pct(late, len(trials))}
        summary.append(row)
    pairs = (("pre_params", "fp_params"), ("pre_grads", "fp_grads"), ("pre_optim", "fp_optim"))
    # The guarantee: the first step at which a part differs (one element differs then: the
    # flipped one, or the one parameter an elementwise optimizer moved with it) is seen.
    first_misses = sum(1 for r in records for sha, fp in pairs
                       if r[sha] and min(r[sha]) not in r[fp])
    # Later, many elements differ by a few ulps, and +-ulp differences can cancel in a sum.
    misses = sum(1 for r in records for sha, fp in pairs for step in r[sha] if step not in r[fp])
    compared = sum(len(r[sha]) for r in records for sha, _ in pairs)
    return {"cells": summary, "controls": len(controls),
            "controls_equal_to_reference": sum(r["final_equal"] for r in controls),
            "fingerprint_first_divergence_misses": first_misses,
            "fingerprint_later_misses": misses, "differing_part_steps": compared}


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def markdown(result: dict) -> str:
    lines = ["| tensor kind | bit | n | " + " | ".join(DETECTORS) + " |",
             "|---|---|---|" + "---|" * len(DETECTORS)]
    for row in result["cells"]:
        cells = [f"{row[d]['detected_pct']:.0f} / {row[d]['escaped_pct']:.0f} / {row[d]['healed_pct']:.0f}"
                 for d in DETECTORS]
        lines.append(f"| {row['kind']} | {row['bit_class']} | {row['n']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Each cell: % detected / % escaped into every replica / % healed. "
                 f"Controls equal to the reference: {result['controls_equal_to_reference']}/{result['controls']}. "
                 "Exact checksums vs sha256, at the first step a part differed: "
                 f"{result['fingerprint_first_divergence_misses']} misses; at later steps (many elements "
                 f"differing, sums can cancel): {result['fingerprint_later_misses']} of "
                 f"{result['differing_part_steps']} differing (part, step) pairs.")
    return "\n".join(lines)


def study(flips: int, model: str, steps: int, flip_step: int, seed: int, controls: int) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = tempfile.mkdtemp(prefix="trainchaos-sdc-escape-")
    out = os.path.join(run_dir, "result.json")
    args = {"flips": flips, "model": model, "steps": steps, "flip_step": flip_step, "seed": seed,
            "controls": controls}
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    procs = [ctx.Process(target=_worker, args=(r, port, run_dir, args, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=1800)
        with open(out, encoding="utf-8") as fh:
            raw = json.load(fh)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
                p.join()
        shutil.rmtree(run_dir, ignore_errors=True)
    result = summarize(raw["records"], flip_step, steps)
    result.update({
        "config": args, "wall_s": round(time.perf_counter() - started, 1),
        "reference_ms_per_step": round(raw["reference_s"] / steps * 1000, 1),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}",
        "trials": raw["records"]})
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flips", type=int, default=24, help="seeded elements per (tensor kind, bit) cell")
    parser.add_argument("--model", default="mlp", choices=("mlp", "tiny-gpt"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--flip-step", type=int, default=23)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--controls", type=int, default=3)
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    if not 2 <= args.flip_step <= args.steps:
        parser.error("--flip-step must be between 2 (optimizer state exists after step 1) and --steps")
    os.makedirs(args.out, exist_ok=True)
    result = study(args.flips, args.model, args.steps, args.flip_step, args.seed, args.controls)
    with open(os.path.join(args.out, "sdc_escape.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    table = markdown(result)
    with open(os.path.join(args.out, "sdc_escape.md"), "w", encoding="utf-8") as fh:
        fh.write(table + "\n")
    print(table)
    print(f"\n{result['wall_s']} s, {result['date']}, {result['machine']}")
    ok = (result["controls_equal_to_reference"] == result["controls"]
          and result["fingerprint_first_divergence_misses"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
