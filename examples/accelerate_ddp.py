"""HuggingFace Accelerate: a small model trained with Accelerator.prepare under `accelerate launch`.

Accelerate never picks the ranks itself: `accelerate launch` starts the processes (through torch.distributed.run
for several per node) and Accelerator() reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT. On a node without
GPUs the processes only form a group (MULTI_CPU, gloo) when ACCELERATE_USE_CPU is set or Accelerator(cpu=True);
otherwise each would train alone (DistributedType.NO) — the report line says which it was.

    accelerate launch --multi_gpu --num_processes=2 examples/accelerate_ddp.py      # (+ ACCELERATE_USE_CPU=true on CPU)
    envrun --image build/local-cpu-pytorch.sif srun accelerate launch examples/accelerate_ddp.py
    envrun --image build/local-cpu-pytorch.sif srun -N 2 accelerate launch examples/accelerate_ddp.py
"""

from __future__ import annotations

import argparse
import sys

import torch
from accelerate import Accelerator
from example_report import emit_report, finish_distributed, launch_facts, parameter_agreement
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per process per step")
    parser.add_argument("--samples", type=int, default=1024, help="size of the synthetic data set")
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1234)
    # other arguments are ignored, and reported back as given (the argv checks of the tests)
    return parser.parse_known_args(argv)[0]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    accelerator = Accelerator()
    # the same data and initial weights everywhere; the prepared DataLoader gives each process its own shard
    torch.manual_seed(args.seed)
    x = torch.randn(args.samples, args.features)
    y = (x @ torch.linspace(-1, 1, args.features)).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(args.features, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    first_loss = last_loss = None
    steps = 0
    for _ in range(args.epochs):
        for batch_x, batch_y in loader:
            loss = nn.functional.mse_loss(model(batch_x), batch_y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            steps += 1
            last_loss = loss.item()
            first_loss = last_loss if first_loss is None else first_loss

    agreement = parameter_agreement(accelerator.unwrap_model(model).parameters())
    emit_report({
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "local_rank": accelerator.local_process_index,
        "distributed_type": str(accelerator.distributed_type).rsplit(".", 1)[-1],
        "backend": accelerator.state.backend,
        "steps": steps,
        "first_loss": first_loss,
        "last_loss": last_loss,
        "argv": sys.argv[1:],
        **agreement,
        **launch_facts(),
    })
    del model, optimizer, loader
    finish_distributed()
    return 0 if agreement["params_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
