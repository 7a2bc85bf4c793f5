"""Lightning DDP: a LightningModule trained with Trainer(strategy="ddp"), under torchrun or `srun python`.

Lightning never starts processes here: the launcher does, and Lightning picks a cluster environment from
the variables it finds. In Lightning 2.6 TorchElasticEnvironment (TORCHELASTIC_RUN_ID, set by torchrun)
is tried first, then SLURMEnvironment (SLURM_NTASKS, unless the job is named "bash" or "interactive"),
then LightningEnvironment (LOCAL_RANK and friends set by hand). The report line says which one won and
the world size and ranks Lightning derived from it, so a wrong layout shows up in tests, not as a hang.

    torchrun --standalone --nproc-per-node=2 examples/lightning_ddp.py
    envrun --image build/local-cpu-pytorch.sif srun torchrun examples/lightning_ddp.py
    envrun --image build/local-cpu-pytorch.sif srun python examples/lightning_ddp.py

--devices and --num-nodes default to what the launcher says (LOCAL_WORLD_SIZE and WORLD_SIZE, else Slurm's
tasks per node and node count), because Lightning checks they match the environment it detected.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from example_report import emit_metric, emit_report, finish_distributed, launch_facts, parameter_agreement
from launch_env import slurm_tasks_on_this_node
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CHECKPOINT_NAME = "lightning_ddp.ckpt"


def default_devices(environ: Mapping[str, str]) -> tuple[int, str]:
    """Processes on this node, and which variable said so."""
    if "LOCAL_WORLD_SIZE" in environ:
        return int(environ["LOCAL_WORLD_SIZE"]), "LOCAL_WORLD_SIZE"
    if "SLURM_NTASKS" in environ:
        return slurm_tasks_on_this_node(environ), "SLURM tasks per node"
    return 1, "default"


def default_num_nodes(environ: Mapping[str, str]) -> tuple[int, str]:
    if "WORLD_SIZE" in environ and "LOCAL_WORLD_SIZE" in environ:
        return max(1, int(environ["WORLD_SIZE"]) // int(environ["LOCAL_WORLD_SIZE"])), "WORLD_SIZE/LOCAL_WORLD_SIZE"
    for name in ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if name in environ:
            return int(environ[name]), name
    return 1, "default"


def set_node_rank_from_rank(environ: MutableMapping[str, str]) -> None:
    """LightningEnvironment (processes started by hand, no torchrun or Slurm detected) ignores RANK and computes
    NODE_RANK * devices + LOCAL_RANK, with NODE_RANK defaulting to 0: every node would claim ranks 0..n-1."""
    if "RANK" in environ and "LOCAL_WORLD_SIZE" in environ and not {"NODE_RANK", "GROUP_RANK"} & environ.keys():
        environ["NODE_RANK"] = str(int(environ["RANK"]) // int(environ["LOCAL_WORLD_SIZE"]))


def quiet_other_ranks(environ: Mapping[str, str]) -> None:
    """Human-readable output from rank 0 only. Lightning logs "Initializing distributed" and library warnings
    on every rank before the Trainer knows the ranks, so go by what the launcher set."""
    if int(environ.get("RANK", environ.get("SLURM_PROCID", "0"))) != 0:
        warnings.filterwarnings("ignore")
        for name in ("lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    devices, devices_from = default_devices(os.environ)
    nodes, nodes_from = default_num_nodes(os.environ)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per process per step")
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--devices", type=int, default=devices, help=f"processes per node (default {devices}, from {devices_from})")
    parser.add_argument("--num-nodes", type=int, default=nodes, help=f"nodes (default {nodes}, from {nodes_from})")
    parser.add_argument("--output-dir", default="./checkpoints", help="where the final " + CHECKPOINT_NAME + " goes")
    parser.add_argument("--no-save", action="store_true", help="do not write the final checkpoint")
    args = parser.parse_args(argv)
    args.devices_from = devices_from if args.devices == devices else "--devices"
    args.num_nodes_from = nodes_from if args.num_nodes == nodes else "--num-nodes"
    return args


def synthetic_regression(samples: int, features: int, seed: int) -> TensorDataset:
    """A smooth nonlinear target from a fixed seed: the same data on every rank, the sampler shards it."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    weights = torch.randn(features, 1, generator=generator) / features**0.5
    targets = inputs @ weights + 0.5 * torch.sin(2 * inputs[:, :1]) + 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(inputs, targets)


class Regressor(L.LightningModule):
    def __init__(self, features: int, lr: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, 1))
        self.lr = lr
        self.epoch_losses: list[float] = []
        self.samples_seen: list[int] = []
        self._loss_sum = 0.0
        self._batches = 0
        self._samples = 0

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = nn.functional.mse_loss(self.net(inputs), targets)
        self._loss_sum += loss.item()
        self._batches += 1
        self._samples += len(inputs)
        return loss

    def on_train_epoch_end(self) -> None:
        # Mean of the ranks' mean losses; reduce is a collective, so every rank must get here.
        local = torch.tensor(self._loss_sum / max(1, self._batches), device=self.device)
        self.epoch_losses.append(float(self.trainer.strategy.reduce(local, reduce_op="mean")))
        self.samples_seen.append(self._samples)
        self._loss_sum, self._batches, self._samples = 0.0, 0, 0
        if self.trainer.is_global_zero:
            print(f"epoch {self.current_epoch + 1}/{self.trainer.max_epochs}: mean loss over ranks {self.epoch_losses[-1]:.4f}",
                  flush=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    set_node_rank_from_rank(os.environ)
    quiet_other_ranks(os.environ)
    # The data loader runs in the main process on purpose (tiny data); Lightning's hint about workers is noise here.
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    L.seed_everything(args.seed, verbose=False)

    dataset = synthetic_regression(args.samples, args.features, args.seed)
    # shuffle=True: Lightning swaps in a DistributedSampler that keeps shuffling, and calls set_epoch itself.
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = Regressor(args.features, args.lr)
    trainer = L.Trainer(
        accelerator="auto",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy="ddp",
        max_epochs=args.epochs,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=args.output_dir,
    )
    fit_started = time.perf_counter()
    trainer.fit(model, loader)
    train_s = time.perf_counter() - fit_started  # fit() includes joining the process group: a few seconds' overhead
    emit_metric(samples_per_s=sum(model.samples_seen) * trainer.world_size / train_s, train_s=train_s)

    model.eval()
    with torch.no_grad():
        inputs, targets = dataset.tensors
        final_mse = float(nn.functional.mse_loss(model.net(inputs.to(model.device)), targets.to(model.device)))
    checkpoint = None
    if not args.no_save:
        checkpoint = str(Path(args.output_dir) / CHECKPOINT_NAME)
        # Every rank calls it; Lightning writes from rank 0 only. weights_only=False: optimizer state too.
        trainer.save_checkpoint(checkpoint, weights_only=False)
    agreement = parameter_agreement(model.parameters())
    environment = trainer.strategy.cluster_environment
    emit_report({
        "example": "lightning_ddp",
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "num_nodes": trainer.num_nodes,
        "num_devices": trainer.num_devices,
        "devices_from": args.devices_from,
        "num_nodes_from": args.num_nodes_from,
        "cluster_environment": type(environment).__name__,
        "strategy": type(trainer.strategy).__name__,
        "accelerator": type(trainer.accelerator).__name__,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "env_rank": os.environ.get("RANK"),
        "env_world_size": os.environ.get("WORLD_SIZE"),
        "slurm_procid": os.environ.get("SLURM_PROCID"),
        "slurm_ntasks": os.environ.get("SLURM_NTASKS"),
        "torchelastic_run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        **launch_facts(),
        "epochs": trainer.current_epoch,
        "samples_per_rank_per_epoch": model.samples_seen[0] if model.samples_seen else None,
        "first_loss": model.epoch_losses[0] if model.epoch_losses else None,
        "final_loss": model.epoch_losses[-1] if model.epoch_losses else None,
        "epoch_losses": model.epoch_losses,
        "final_mse_full_data": final_mse,
        **agreement,
        "checkpoint": checkpoint,
        "lightning_version": L.__version__,
        "seconds": round(time.perf_counter() - started, 3),
    })
    is_global_zero, world_size = trainer.is_global_zero, trainer.world_size
    del trainer, model  # the strategy's DDP wrapper holds the process group: release it before exit
    finish_distributed()
    if is_global_zero:
        print(f"lightning_ddp: {world_size} ranks via {type(environment).__name__}; "
              f"parameters agree: {agreement['params_agree']}", flush=True)
    return 0 if agreement["params_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
