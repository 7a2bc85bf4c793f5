"""Plain PyTorch DDP training: DistributedSampler, rank-0 checkpoint, every rank verifies it.

A small MLP learns a synthetic 4-class problem that every rank generates identically from a seed;
DistributedSampler gives each rank a disjoint shard and set_epoch reshuffles it each epoch. Rank 0
alone writes the checkpoint (several ranks writing one file would clobber it), then after a barrier
every rank loads it and checks it equals its own parameters: that only holds if DDP kept them in step.

    torchrun --standalone --nproc-per-node=2 examples/ddp_train.py --epochs 5
    envrun --image build/local-cpu-pytorch.sif srun torchrun examples/ddp_train.py
    envrun --image build/local-cpu-pytorch.sif srun python examples/ddp_train.py

Works on CPU (gloo) and GPU (nccl). The checkpoint directory must be shared by all nodes, because
every rank reads the file rank 0 wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from example_report import emit_metric, emit_report, finish_distributed, launch_facts, parameter_agreement
from launch_env import current_layout, fill_single_process_env, fill_torch_env_from_slurm
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CHECKPOINT_NAME = "ddp_train.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per process per step")
    parser.add_argument("--samples", type=int, default=4096, help="size of the synthetic data set")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--output-dir", default="./checkpoints", help="where rank 0 writes " + CHECKPOINT_NAME)
    return parser.parse_args(argv)


def synthetic_classification(samples: int, features: int, classes: int, seed: int) -> TensorDataset:
    """Labels come from a fixed random linear teacher, so the problem is learnable and identical on every rank."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    teacher = torch.randn(features, classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    return TensorDataset(inputs, labels)


def build_model(features: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, classes))


def mean_over_ranks(total: float, count: int, device: torch.device) -> float:
    sums = torch.tensor([total, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    return float(sums[0] / sums[1])


def barrier(device: torch.device) -> None:
    # NCCL wants to know the device, or it guesses and warns.
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, epochs: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epochs": epochs}, partial)
    # Rename last, so a reader never sees a half-written checkpoint.
    os.replace(partial, path)


def checkpoint_matches(path: Path, model: nn.Module, device: torch.device) -> bool:
    saved = torch.load(path, map_location=device, weights_only=True)["model"]
    own = model.state_dict()
    return saved.keys() == own.keys() and all(torch.equal(saved[name], own[name]) for name in own)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    fill_torch_env_from_slurm()
    fill_single_process_env()
    layout = current_layout()
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device(f"cuda:{layout.local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *_a, **_k: None)

    dataset = synthetic_classification(args.samples, args.features, args.classes, args.seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed + 1)  # DDP broadcasts rank 0's weights anyway; this makes runs repeatable
    model = build_model(args.features, args.classes).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    say(f"ddp_train: {world} ranks, backend {backend}, {len(sampler)} of {len(dataset)} samples per rank per epoch", flush=True)

    epoch_losses: list[float] = []
    barrier(device)
    train_started = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # without this every epoch repeats the same shuffle
        ddp.train()
        total, count = 0.0, 0
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            loss = nn.functional.cross_entropy(ddp(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(labels)
            count += len(labels)
        epoch_losses.append(mean_over_ranks(total, count, device))
        say(f"epoch {epoch + 1}/{args.epochs}: mean loss over ranks {epoch_losses[-1]:.4f}", flush=True)
    train_s = time.perf_counter() - train_started
    emit_metric(samples_per_s=len(sampler) * world * args.epochs / train_s, train_s=train_s)

    # The last epoch's shards must cover the data set between them; a sample appears twice only where
    # DistributedSampler pads the data set to a multiple of the world size.
    shards: list[list[int] | None] = [None] * world
    dist.all_gather_object(shards, list(sampler))
    seen = [index for shard in shards for index in (shard or [])]
    padding = world * len(sampler) - len(dataset)
    shards_ok = set(seen) == set(range(len(dataset))) and len(seen) - len(set(seen)) == padding

    model.eval()
    with torch.no_grad():
        inputs, labels = dataset.tensors
        accuracy = float((model(inputs.to(device)).argmax(dim=1) == labels.to(device)).float().mean())

    path = Path(args.output_dir) / CHECKPOINT_NAME
    if rank == 0:
        save_checkpoint(path, model, optimizer, args.epochs)
    barrier(device)
    same_as_checkpoint = checkpoint_matches(path, model, device)
    agreement = parameter_agreement(model.parameters())
    emit_report({
        "example": "ddp_train",
        "rank": rank,
        "world_size": world,
        "local_rank": layout.local_rank,
        "local_world_size": layout.local_world_size,
        "backend": backend,
        **launch_facts(),
        "epochs": args.epochs,
        "samples_per_rank": len(sampler),
        "shards_cover_dataset": shards_ok,
        "first_loss": epoch_losses[0] if epoch_losses else None,
        "final_loss": epoch_losses[-1] if epoch_losses else None,
        "epoch_losses": epoch_losses,
        "accuracy": accuracy,
        **agreement,
        "checkpoint": str(path),
        "checkpoint_matches": same_as_checkpoint,
        "seconds": round(time.perf_counter() - started, 3),
    })
    ok = agreement["params_agree"] and same_as_checkpoint and shards_ok
    barrier(device)
    say(f"ddp_train: accuracy {accuracy:.3f}; parameters agree: {agreement['params_agree']}; "
        f"checkpoint {path} matches: {same_as_checkpoint}", flush=True)
    del ddp, optimizer  # they hold the process group: finish_distributed() says why it must go before exit
    finish_distributed()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
