"""ckpt-chaos's ``lightning_trainer`` target as a script trainchaos can run, for
``benchmarks/ckpt_chaos_compare.py``: the same training and checkpointing, written here, not
copied. A tiny MLP in a LightningModule, 5 steps an epoch, ``ModelCheckpoint`` at every epoch
end keeping every checkpoint plus ``last.ckpt``, and the resume is Lightning's own
``fit(ckpt_path="last")``. The files are named as the target names them (``ck-step=N.ckpt``),
straight in the checkpoint folder (the target's ``checkpoints/`` subfolder aside). A
callback reports progress, the load and the final digest through the probe (a no-op outside
trainchaos); the saves are not reported (as a script without the adapter), so a lost save is
known by the crash image's audit alone."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import torch
from _cli import cadence_parser  # this folder: the script's own, on sys.path
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from chaos import probe


class Lit(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Report(Callback):
    def on_train_start(self, trainer, pl_module):
        probe.emit("rank_start", rank=0, world_size=1, pid=os.getpid(),
                   node=int(os.environ.get("TRAINCHAOS_NODE", 0)))
        if trainer.global_step:
            probe.emit("ckpt_load", step=trainer.global_step, tier="shared", verified=False, path="last.ckpt")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        probe.step_end(trainer.global_step, float(outputs["loss"]))
        probe.state_digest(trainer.global_step, model=pl_module)

    def on_train_end(self, trainer, pl_module):
        probe.final_state(trainer.global_step, model=pl_module)


def main() -> None:
    parser = cadence_parser()
    args = parser.parse_args()
    pl.seed_everything(0, workers=False)
    model = Lit()
    gen = torch.Generator().manual_seed(123)
    x = torch.randn(args.every * 16, 8, generator=gen)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=False)
    checkpoints = ModelCheckpoint(dirpath=args.out, filename="ck-{step}",
                                  every_n_epochs=1, save_top_k=-1, save_last=True)
    trainer = pl.Trainer(max_epochs=args.steps // args.every, accelerator="cpu", devices=1,
                         callbacks=[Report(), checkpoints], enable_progress_bar=False,
                         enable_model_summary=False, logger=False, default_root_dir=args.out)
    resume = os.path.join(args.out, "last.ckpt")
    trainer.fit(model, data, ckpt_path="last" if os.path.exists(resume) else None)


if __name__ == "__main__":
    main()
