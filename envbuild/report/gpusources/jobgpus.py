"""Which of the GPUs a tool lists are the job's on this node (`job_devices`), for every GPU source.

In this order:
- SLURM_STEP_GPUS, else SLURM_JOB_GPUS: Slurm's global GPU ids, which Slurm documents as "not relative to any
  device cgroup". When the tool shows as many GPUs as the job holds, the node's device cgroup has hidden the
  others (or the job holds the whole node): all shown are the job's. When it shows more (no cgroup), the ids are
  taken as positions in the tool's list, which is PCI order; that holds where gres.conf lists the GPUs in that
  order (Slurm's AutoDetect does).
- else the visible-device variables the task got, as each vendor's runtime reads them
  (envbuild.shared.visibledevices.VISIBLE_DEVICE_STAGES): CUDA_VISIBLE_DEVICES (NVIDIA), ROCR_VISIBLE_DEVICES and
  then HIP_VISIBLE_DEVICES within it (AMD), GPU_DEVICE_ORDINAL (both; Slurm sets it like the others). Numbers
  index the tool's list (relative to the cgroup when there is one, physical when not: both are the tool's list);
  NVIDIA UUIDs (and their unique prefixes, which CUDA accepts) are matched against the tool's UUIDs. MIG
  instances and unmatched values cannot be mapped: all GPUs are reported, and the caveat says so.
- else all GPUs of the node are reported, and the caveat says so.
The per-task variables can be narrower than the step (`--gpus-per-task`), which is why Slurm's step ids come
first. /sys lists every GPU of the node whatever the cgroup, so a source that reads it (`whole_node_view`) takes
visible-device numbers as the node's GPU numbers and says so in the caveat.

Light: no import at run time but the shared list of variables.
"""

from __future__ import annotations

from envbuild.shared.visibledevices import VISIBLE_DEVICE_STAGES

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from envbuild.report.gpusources.sourcebase import Device


def job_devices(devices: Sequence[Device], environ: Mapping[str, str], *, vendor: str,
                whole_node_view: bool = False) -> tuple[list[Device], str]:
    """The job's GPUs among `devices` (a tool's list, in its order) and a caveat ("" when sure); see the module
    docstring. `vendor`: "nvidia" or "amd", whose runtime's variables count. `whole_node_view`: the list shows
    every GPU of the node even under a device cgroup (sysfs)."""
    devices = list(devices)
    for variable in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = environ.get(variable, "").strip()
        ids = _numbers(value)
        if not value or ids is None:
            continue
        if len(ids) == len(devices) and not whole_node_view:
            return devices, ""
        if ids and max(ids) < len(devices):
            return [devices[i] for i in sorted(set(ids))], ""
        return devices, (f"{variable}={value} does not match the {len(devices)} GPUs seen here: "
                         "all of them are reported")
    variables: list[str] = []
    for stage in VISIBLE_DEVICE_STAGES[vendor]:  # on AMD, HIP's list indexes the GPUs that ROCR's (or the ordinal) left
        variables += [name for name in stage if name in environ][:1]  # the first one set in a stage counts
    if not variables:
        return devices, f"no Slurm GPU ids or visible-device variable: all {len(devices)} GPUs of the node are reported"
    chosen = devices
    for variable in variables:
        chosen, caveat = _visible(chosen, variable, environ[variable], whole_node_view and chosen is devices)
        if caveat:
            return devices, caveat
    if whole_node_view and chosen and _numbers(environ[variables[0]]) is not None:
        return chosen, f"sysfs lists every GPU of the node: {variables[0]} taken as the node's GPU numbers"
    return chosen, ""


def _visible(devices: list[Device], variable: str, value: str, whole_node_view: bool) -> tuple[list[Device], str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items or items == ["-1"] or value.strip() == "NoDevFiles":
        return [], ""
    numbers = _numbers(value)
    if numbers is not None:
        if len(numbers) == len(devices) and not whole_node_view:
            return devices, ""
        if max(numbers) < len(devices):
            return [devices[i] for i in sorted(set(numbers))], ""
        return devices, f"{variable}={value} does not match the {len(devices)} GPUs seen here: all of them are reported"
    if any(item.upper().startswith("MIG-") for item in items):
        return devices, f"{variable} names MIG instances, which have no utilisation of their own: whole GPUs are reported"
    picked: list[Device] = []
    for item in items:
        matches = [d for d in devices if d.uuid and d.uuid.lower().startswith(item.lower())]
        if len(matches) != 1:
            return devices, f"{variable}={value} does not name the GPUs seen here: all of them are reported"
        picked.append(matches[0])
    return [d for d in devices if d in picked], ""


def _numbers(value: str) -> list[int] | None:
    """"0,2-3" -> [0, 2, 3]; None when it is not a list of numbers (UUIDs)."""
    numbers: list[int] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            return None
        numbers.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    return numbers
