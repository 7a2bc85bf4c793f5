"""The environment variables that narrow which GPUs a process sees (the visible-device variables), in one home:
envrun's node facts (envbuild.host.node), the job's variables (envbuild.launch.allocation), doctor and the job
report's GPU reader (envbuild.report.gpusources.jobgpus) all read them here, never from a list of their own.

Each name is written once, below; the lists are made of those names. Light: constants only (envrun's start-up
path and the report's sampler, which starts with `python -S`, both read this module).
"""

from __future__ import annotations

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # NVIDIA's CUDA runtime
ROCR_VISIBLE_DEVICES = "ROCR_VISIBLE_DEVICES"  # AMD's ROCm runtime (ROCr), below HIP
HIP_VISIBLE_DEVICES = "HIP_VISIBLE_DEVICES"  # AMD's HIP: indexes the GPUs that ROCr left
GPU_DEVICE_ORDINAL = "GPU_DEVICE_ORDINAL"  # read by both vendors' runtimes; Slurm sets it like the others

# Every visible-device variable. Where several are set, the first set one in this order counts a task's GPUs.
VISIBLE_DEVICE_VARIABLES = (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL)

# How each vendor's runtime narrows the GPUs it is shown: stages applied in turn, each one indexing what the
# stage before left; within a stage the first variable set counts (GPU_DEVICE_ORDINAL repeats the first).
VISIBLE_DEVICE_STAGES: dict[str, tuple[tuple[str, ...], ...]] = {
    "nvidia": ((CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL),),
    "amd": ((ROCR_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL), (HIP_VISIBLE_DEVICES,)),
}
