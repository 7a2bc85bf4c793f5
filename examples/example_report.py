"""The one machine-readable line each example prints per rank: `EXAMPLE_REPORT {json}`.

Tests grep for the prefix and parse the rest as JSON, so the line must be a single line and every value
JSON-serialisable. The launch facts (threads, tokenizer parallelism, CPU binding) are what envrun tunes,
so every example reports them the same way.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist

REPORT_PREFIX = "EXAMPLE_REPORT "


def launch_facts() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM"),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
    }


def parameter_agreement(parameters: Iterable[torch.Tensor]) -> dict[str, Any]:
    """Checksum of this rank's parameters and whether every rank holds exactly the same values.

    Must be called on every rank (it all-gathers). The tensor stays on the parameters' device because
    NCCL only gathers GPU tensors.
    """
    flat = torch.cat([p.detach().reshape(-1).float() for p in parameters])
    max_diff = 0.0
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, flat)
        max_diff = max(float((other - flat).abs().max()) for other in gathered)
    return {
        "param_count": flat.numel(),
        "param_checksum": float(flat.double().sum()),
        "params_agree": max_diff == 0.0,
        "param_max_diff": max_diff,
    }


def emit_report(fields: Mapping[str, Any]) -> None:
    """Write the line with one write(2): print() may issue the text and its newline as two writes, and
    then ranks finishing together splice their lines. A pipe write up to PIPE_BUF (4 KiB) is atomic."""
    line = REPORT_PREFIX + json.dumps(dict(fields), sort_keys=True) + "\n"
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


METRIC_PREFIX = "envrun-metric: "


def emit_metric(**values: float) -> None:
    """The throughput line `envrun sweep` reads (README, "Scaling sweeps"): `envrun-metric: KEY=NUMBER ...`,
    with samples_per_s or tokens_per_s and, optionally, train_s. Rank 0 only, after training."""
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    words = " ".join(f"{key}={value:.6g}" for key, value in values.items())
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (METRIC_PREFIX + words + "\n").encode())


def finish_distributed() -> None:
    """Wait for every rank, then destroy the process group while the interpreter is fully alive.

    Call it after dropping the objects that hold the group (the Trainer, the DDP-wrapped model).
    Why: the gloo process group owns C++ worker threads. HF Trainer and Lightning never destroy it, and
    the DDP wrapper keeps it referenced even after destroy_process_group(), so it used to be destroyed
    during interpreter finalization: a gloo worker thread that then releases a finished collective needs
    the GIL, Python ends the thread, and the unwind through a noexcept destructor aborts the rank
    ("terminate called without an active exception", SIGABRT, seen in CI on a loaded machine; core dump:
    ProcessGroupGloo::runLoop -> ~AsyncWork -> gil_scoped_acquire -> pthread_exit in Py_FinalizeEx) or, with only
    destroy_process_group() added, its destructor joined worker threads while holding the GIL and hung
    (py-spy: main thread in std::thread::join under `sys.exit(main())`, 1 run in 6 with a CPU burner).
    Collecting the references first makes the destructor run here, with no work queued, after the barrier.
    """
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()  # the DDP wrapper and its reducer, dropped by the caller, go now and release the group
        dist.destroy_process_group()
    gc.collect()
