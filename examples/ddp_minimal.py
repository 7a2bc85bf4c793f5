"""Minimal DistributedDataParallel training that proves the ranks really train together.

Runs under torchrun (or any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
Uses NCCL on GPUs and gloo on CPUs. Each rank trains on its own shard of a synthetic regression
problem; at the end every rank's parameters are compared through an all-gather and must be equal.

    envrun --image local-cpu-pytorch.sif srun torchrun examples/ddp_minimal.py --steps 50
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (divided among ranks)")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", action="store_true", help="print one JSON line per rank (for tests)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    # Same initial weights everywhere (DDP also broadcasts them), different data per rank.
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(args.features, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(args.seed + 1000 + rank)
    true_weights = torch.linspace(-1, 1, args.features)
    per_rank = max(1, args.batch_size // world)

    first_loss = last_loss = 0.0
    dist.barrier()  # time the training loop only, from when every rank is ready
    started = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(per_rank, args.features, generator=generator)
        y = (x @ true_weights).unsqueeze(1) + 0.01 * torch.randn(per_rank, 1, generator=generator)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            first_loss = loss.item()
        last_loss = loss.item()

    train_s = time.perf_counter() - started

    # Every rank must hold identical parameters after synchronous DDP training.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).to(device)
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    max_diff = max(float((g - flat).abs().max()) for g in gathered)
    agree = max_diff == 0.0

    report = {
        "rank": rank,
        "world_size": world,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "backend": backend,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM"),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "first_loss": round(first_loss, 6),
        "last_loss": round(last_loss, 6),
        "param_checksum": round(float(flat.double().sum()), 10),
        "params_agree": agree,
    }
    # One write per line: under `python -u` (as torchrun starts ranks) print() writes the text and the
    # newline separately, and lines of concurrent ranks would interleave.
    if args.json:
        line = "DDP_REPORT " + json.dumps(report, sort_keys=True)
    else:
        line = (f"rank {rank}/{world} local {local_rank} on {report['host']}: loss {first_loss:.4f} -> {last_loss:.4f}, "
                f"checksum {report['param_checksum']:.6f}, cpus {report['cpu_affinity']}")
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    dist.barrier()
    if rank == 0:
        verdict = "PARAMETERS AGREE" if agree else f"PARAMETERS DIFFER (max difference {max_diff})"
        print(f"ddp_minimal: world size {world}, backend {backend}: {verdict}", flush=True)
        # the throughput line envrun sweep reads (README, "Scaling sweeps"): samples of every rank per second
        samples = args.steps * per_rank * world
        print(f"envrun-metric: samples_per_s={samples / train_s:.1f} train_s={train_s:.3f} samples={samples}", flush=True)
    # Drop the DDP wrapper (it holds the process group) before destroying the group: otherwise the group
    # outlives destroy_process_group() and its gloo worker threads are still running when the interpreter
    # shuts down; one that then releases a finished collective needs the GIL, Python ends that thread, and
    # the unwind through a noexcept destructor aborts the rank ("terminate called without an active
    # exception", SIGABRT after a clean run: 1 run in 19 under srun on 2 cores; the core dump shows
    # ProcessGroupGloo::runLoop -> ~AsyncWork -> gil_scoped_acquire -> pthread_exit during Py_FinalizeEx).
    del ddp, optimizer
    gc.collect()
    dist.destroy_process_group()
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
