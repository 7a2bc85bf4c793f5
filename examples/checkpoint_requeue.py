"""A training loop that survives its time limit: run it with `envrun sbatch --requeue`.

    envrun sbatch --requeue --time 04:00:00 --submit -- python examples/checkpoint_requeue.py --steps 100000

Near the time limit envrun asks the ranks to checkpoint in two ways: the file named by
$ENVRUN_CHECKPOINT_FILE appears, and each rank gets SIGUSR1. Either is enough; this loop handles both. All
ranks must stop at the same step (a rank that leaves early would leave the others waiting in all_reduce),
so the ranks agree on "stop now" with one small all_reduce per step. Rank 0 saves while the others wait
at a barrier, everyone exits 0, the
job requeues itself, and the next run ($ENVRUN_RESTART = 1, 2, ...) resumes from the checkpoint.

A tiny model, no data download: the point is the control flow.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import time

import torch
import torch.distributed as dist

stop_requested = False


def on_signal(signum: int, _frame: object) -> None:
    global stop_requested
    stop_requested = True
    print(f"rank {os.environ.get('RANK', '0')}: got signal {signal.Signals(signum).name}", flush=True)


def checkpoint_hook_fired() -> bool:
    path = os.environ.get("ENVRUN_CHECKPOINT_FILE")
    return stop_requested or bool(path and os.path.exists(path))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--checkpoint", default="checkpoint_requeue.pt")
    args = parser.parse_args()
    signal.signal(signal.SIGUSR1, on_signal)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        if rank == 0:
            print(f"RESUMED from step {step} (run {os.environ.get('ENVRUN_RESTART', '0')})", flush=True)
    while step < args.steps:
        stop = torch.tensor([1.0 if checkpoint_hook_fired() else 0.0])
        if distributed:
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           args.checkpoint)
                print(f"CHECKPOINT at step {step} (run {os.environ.get('ENVRUN_RESTART', '0')})", flush=True)
            if distributed:
                # The others wait until the checkpoint is written: a rank that tears its process group down
                # while rank 0 is still saving can abort in gloo's teardown ("terminate called without an
                # active exception", SIGABRT), which fails the step that was meant to end cleanly.
                dist.barrier()
            break
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        time.sleep(args.step_seconds)
    else:
        if rank == 0:
            print(f"DONE after {step} steps", flush=True)
    if distributed:
        # Every collective's tensors released, and a last barrier, before the group goes: a gloo worker that
        # releases a finished collective while the interpreter shuts down needs the GIL and aborts the rank
        # ("terminate called without an active exception", SIGABRT after a clean checkpoint; see ddp_minimal.py).
        # A run that checkpoints right after it resumed has just done its first all_reduce when it leaves.
        stop = loss = None
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
