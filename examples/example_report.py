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


def finish_distributed() -> None:
    """Wait for every rank, then tear the process group down before the interpreter exits.

    Without this a rank can abort at exit ("terminate called without an active exception", SIGABRT):
    the gloo process group's worker threads are C++ std::threads that are still joinable when the
    interpreter's static destructors run, which calls std::terminate. Which rank, and whether at all,
    depends on thread timing, so it showed only on a loaded machine (CI). HF Trainer and Lightning never
    destroy the group they created; the plain DDP examples do it themselves.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
