"""Which binding a launch gets on a site that documents a newer one beside the CPU masks (LUMI-G, 2026): srun's
own GPU binding (`--gpu-bind=map:... --gres-flags=allow-task-sharing`, from the Slurm whose srun has that
flag) and torchrun's NUMA binding (`--numa-binding=MODE`, from the torch the site's guide runs it with).
Pure: the Slurm and torch versions come with the request (envbuild.launch.bindingfacts reads them), and each
choice comes back with the sentence that says why, for --explain and --dry-run.

Whatever the user's own srun or torchrun options already say about binding wins: envrun adds nothing that
repeats or contradicts them."""

from __future__ import annotations

from envbuild.launch.args import has_option, option_value
from envbuild.shared.versionnumbers import at_least, release_numbers

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe

# What a plan made without reading them (a batch script's preview, a wrapper, a test) knows of this Slurm and of
# the image's torch: nothing; the envrun that starts the step reads both (envbuild.commands.launch)
SLURM_NOT_READ = ("", "not read for this plan: envrun reads srun's version when it starts the step")
TORCH_NOT_READ = ("", "not read for this plan: envrun reads it from the image when it starts the step", False)

# srun --gpu-bind values that bind no GPU to a task: verbose only reports, none turns binding off
NO_GPU_BINDING = frozenset({"", "none", "verbose", "quiet"})
TASK_SHARING = "allow-task-sharing"


def slurm_version_in(line: str) -> str:
    """The version `srun --version` prints ('slurm 23.11.10', 'slurm-wlm 22.05.8'): '23.11.10'; '' for another line."""
    words = line.split()
    if len(words) == 2 and words[0].startswith("slurm") and release_numbers(words[1]):
        return words[1]
    return ""


def user_gpu_binding(opts: tuple[str, ...]) -> str:
    """The user's own srun --gpu-bind value when it binds GPUs to tasks ('' when absent, none or verbose only)."""
    value = option_value(opts, "--gpu-bind") or option_value(opts, "--gpu_bind") or ""
    if any(part not in NO_GPU_BINDING for part in value.split(",")):
        return value
    return ""


def user_gres_flags(opts: tuple[str, ...]) -> str | None:
    """The user's srun --gres-flags value (None when not given)."""
    if not has_option(opts, "--gres-flags", "--gres_flags"):
        return None
    return option_value(opts, "--gres-flags") or option_value(opts, "--gres_flags") or ""


class GpuBindChoice:
    """srun's GPU binding for a one-task-per-GPU launch on a whole node: the options envrun adds (none when the
    CPU masks stay) and why."""

    __slots__ = ("deferred", "options", "reason", "task_gpus")

    def __init__(self, options: tuple[str, ...], reason: str, task_gpus: tuple[int, ...] = (),
                 deferred: bool = False) -> None:
        self.options = options
        self.reason = reason
        self.task_gpus = task_gpus  # local task i -> its GPU, when srun binds them
        # the plan did not read srun's version (SLURM_NOT_READ): the step's envrun chooses when it starts, and the
        # CPU masks the plan shows are what it gets with an older srun
        self.deferred = deferred


def choose_gpu_bind(recipe: SystemRecipe, opts: tuple[str, ...], tasks: int, gpus: int,
                    slurm: tuple[str, str]) -> GpuBindChoice | None:
    """srun --gpu-bind=map with allow-task-sharing when the recipe documents it, each task has one GPU of the
    whole node and srun has the flag (the user's own --gres-flags=allow-task-sharing says so, else srun's
    version); None when the recipe has no such binding. `slurm`: (version or '', where it was read or why not)."""
    bind = recipe.launch.gpu_bind
    if bind is None:
        return None
    cite = recipe.cite("launch.gpu_bind")
    new_form = f"--gpu-bind=map:{','.join(map(str, bind.map))} --gres-flags={TASK_SHARING}"
    if tasks != gpus or gpus != len(bind.map):
        return GpuBindChoice((), f"not {new_form} ({cite}): it gives each task one GPU, and these {tasks} task(s) "
                                 f"share {gpus} GPUs")
    flags = user_gres_flags(opts)
    if flags is not None and TASK_SHARING not in flags.split(","):
        return GpuBindChoice((), f"not {new_form} ({cite}): your srun --gres-flags={flags} has no {TASK_SHARING}, "
                                 "and envrun does not change your flags")
    version, source = slurm
    if flags is None and slurm == SLURM_NOT_READ:
        return GpuBindChoice((), f"{new_form} ({cite}) where srun is Slurm {bind.task_sharing_since} or newer, else "
                                 "the CPU masks below: envrun reads srun's version when it starts the step",
                             deferred=True)
    if flags is not None:
        support = f"your srun --gres-flags={flags}"
    elif not version:
        return GpuBindChoice((), f"not {new_form} ({cite}): this Slurm's version is unknown ({source}), and srun "
                                 f"has --gres-flags={TASK_SHARING} only from Slurm {bind.task_sharing_since}")
    elif not at_least(version, bind.task_sharing_since):
        return GpuBindChoice((), f"not {new_form} ({cite}): srun is Slurm {version} ({source}), and "
                                 f"--gres-flags={TASK_SHARING} came with Slurm {bind.task_sharing_since}")
    else:
        support = f"srun is Slurm {version} ({source}), which has {TASK_SHARING} from {bind.task_sharing_since}"
    options = [f"--gpu-bind=map:{','.join(map(str, bind.map))}"]
    if flags is None:
        options.append(f"--gres-flags={TASK_SHARING}")
    return GpuBindChoice(tuple(options), f"{' '.join(options)}: task i on the i-th block of cores gets the GPU "
                                         f"closest to them, and every task still reaches the node's other GPUs "
                                         f"({cite}); {support}", tuple(bind.map))


def choose_numa_binding(recipe: SystemRecipe, torch: tuple[str, str, bool]) -> tuple[str, str]:
    """torchrun's --numa-binding mode for ranks envrun would otherwise pin itself, and why: ('exclusive', why)
    when the image's torch is the recipe's or newer and the image has numactl (torch runs it); ('', why not)
    otherwise; ('', '') when the recipe names none. `torch`: (version or '', where it was read or why not,
    whether the image has numactl)."""
    numa = recipe.launch.numa_binding
    if numa is None:
        return "", ""
    version, source, numactl = torch
    cite = recipe.cite("launch.numa_binding")
    option = f"--numa-binding={numa.mode}"
    if torch == TORCH_NOT_READ:
        return "", (f"torchrun {option} ({cite}) where the image's torch is {numa.torch_since} or newer and the image "
                    "has numactl, else envrun pins each rank itself (below): envrun reads the image's torch when it "
                    "starts the step")
    if not version:
        return "", (f"not torchrun {option} ({cite}): the image's torch version is unknown ({source}); envrun "
                    "pins each rank itself")
    if not at_least(version, numa.torch_since):
        return "", (f"not torchrun {option} ({cite}): the image's torch is {version} ({source}), older than the "
                    f"{numa.torch_since} the site's guide runs it with; envrun pins each rank itself")
    if not numactl:
        return "", (f"not torchrun {option} ({cite}): the image has no numactl, which torch's NUMA binding runs; "
                    "envrun pins each rank itself")
    return numa.mode, (f"torchrun {option}: torchrun pins each rank to cores near its GPU ({cite}); the image's "
                       f"torch is {version} ({source}), {numa.torch_since} or newer")
