"""Reading a batch script like sbatch and bash (envbuild.slurm.check.parse, scriptprogram, scriptshape)."""

from __future__ import annotations

from envbuild.slurm.check.parse import parse_script
from envbuild.slurm.check.programs import classify_program
from envbuild.slurm.check.shape import JobShape, StepShape, count, size_mb


def directives(text: str) -> list[tuple[int, str, str | None]]:
    return [(d.line, d.name, d.value) for d in parse_script(text).directives]


def test_long_short_and_spaced_forms() -> None:
    text = "\n".join([
        "#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --nodes 3", "#SBATCH -N 4", "#SBATCH -N5", "#SBATCH -p small-g",
        "#SBATCH -A proj", "#SBATCH -t 15", "#SBATCH -c 7", "#SBATCH -n 8", "#SBATCH --exclusive",
        "#SBATCH --ntasks-per-n=4",  # a unique prefix, as getopt allows
    ])
    assert directives(text) == [
        (2, "nodes", "2"), (3, "nodes", "3"), (4, "nodes", "4"), (5, "nodes", "5"), (6, "partition", "small-g"),
        (7, "account", "proj"), (8, "time", "15"), (9, "cpus-per-task", "7"), (10, "ntasks", "8"),
        (11, "exclusive", None), (12, "ntasks-per-node", "4"),
    ]
    assert JobShape(parse_script(text)).nodes == 5  # the last one counts


def test_trailing_comment_and_several_options_on_a_line() -> None:
    text = "#!/bin/bash\n#SBATCH --gres=gpu:v100:4,nvme:200   # the whole node\n#SBATCH -N 2 --time=01:00:00 # two\n"
    assert directives(text) == [(2, "gres", "gpu:v100:4,nvme:200"), (3, "nodes", "2"), (3, "time", "01:00:00")]


def test_directives_stop_at_the_first_command() -> None:
    text = "#!/bin/bash\n\n# a comment\n#SBATCH -N 1\n  # indented comment\nmodule load x\n#SBATCH -N 2\n# SBATCH -N 3\n"
    script = parse_script(text)
    assert [(d.line, d.value) for d in script.directives] == [(4, "1")]
    assert script.first_command_line == 6
    assert script.late_directives == [(7, "#SBATCH -N 2")]
    assert script.directive_lines == [4]


def test_gpus_per_node_in_every_form() -> None:
    def gpus(*lines: str) -> int:
        return JobShape(parse_script("\n".join(["#!/bin/bash", *lines]))).gpus_per_node()

    assert gpus("#SBATCH --gpus-per-node=8") == 8
    assert gpus("#SBATCH --gpus-per-node=mi250:8") == 8
    assert gpus("#SBATCH --gres=gpu:v100:4,nvme:200") == 4
    assert gpus("#SBATCH --gres=nvme:200,gpu:2") == 2
    assert gpus("#SBATCH --gpus=16", "#SBATCH --nodes=2") == 8
    assert gpus("#SBATCH -G 4") == 4
    assert gpus("#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-task=1") == 8
    assert gpus("#SBATCH --nodes=2") == 0


def test_tasks_and_cpus_per_node() -> None:
    job = JobShape(parse_script("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks=16\n#SBATCH -c 7\n"))
    assert job.tasks_per_node() == 8
    cpus = job.cpus()
    assert cpus is not None and cpus.value == 56 and cpus.how == "--ntasks=16 over 2 nodes x -c 7"


def test_sizes_and_counts() -> None:
    assert size_mb("480G") == 480 * 1024
    assert size_mb("480g") == 480 * 1024
    assert size_mb("4000") == 4000  # megabytes by default
    assert size_mb("2T") == 2 * 1024 * 1024
    assert size_mb("512K") == 0
    assert size_mb("100GB") == 100 * 1024
    assert size_mb("0") == 0
    assert size_mb("lots") is None
    assert count("2-4") == 2
    assert count("$N") is None


def test_srun_lines_with_continuations_and_prefixes() -> None:
    text = "\n".join([
        "#!/bin/bash",  # 1
        "#SBATCH -N 1",  # 2
        "",  # 3
        "envrun --image x.sif srun torchrun train.py",  # 4
        "time srun -n 2 \\",  # 5
        "    python train.py",  # 6
        "SRUN_CPUS_PER_TASK=4 srun hostname; echo srun done",  # 7
        "echo srun is not run here",  # 8
        "if srun true; then echo ok; fi",  # 9
        "# srun in a comment",  # 10
        "timeout 600 srun --ntasks-per-node=1 python -m torch.distributed.run --nproc-per-node=4 x.py",  # 11
    ])
    sruns = parse_script(text).sruns
    assert [(s.line, s.program.kind) for s in sruns] == [
        (4, "torchrun"), (5, "python"), (7, "other"), (9, "other"), (11, "torchrun")]
    assert sruns[0].under_envrun and sruns[0].prefix == ("envrun", "--image", "x.sif")
    assert sruns[1].options == ("--ntasks=2",) and sruns[1].written == ("-n", "2")
    assert sruns[2].sets_inline("SRUN_CPUS_PER_TASK")


def test_heredocs_and_quotes_spanning_lines() -> None:
    text = "\n".join([
        "#!/bin/bash",
        "cat << EOF > wrapper.sh",
        "srun python inside_the_heredoc.py",
        "EOF",
        "srun bash -c 'echo start",
        "  torchrun --nproc-per-node=4 train.py'",
        "srun python after.py",
    ])
    sruns = parse_script(text).sruns
    assert [(s.line, s.program.kind) for s in sruns] == [(5, "torchrun"), (7, "python")]


def test_variables_the_script_sets_are_expanded_in_srun_options() -> None:
    text = "#!/bin/bash\nBIND=\"mask_cpu:0xfe\"\nBIND=\"${BIND},0xfe00\"\nexport N=2\nsrun --cpu-bind=$BIND -n $N x\n"
    script = parse_script(text)
    assert script.sruns[0].options == ("--cpu-bind=mask_cpu:0xfe,0xfe00", "--ntasks=2")
    assert script.exports == {"N": 4}


def test_programs_through_containers_shells_and_wrappers() -> None:
    def kind(line: str) -> tuple[str, str]:
        program = classify_program(tuple(line.split()))
        return program.kind, program.via

    assert kind("torchrun --nproc-per-node=8 train.py") == ("torchrun", "")
    assert kind("singularity exec -B /pfs,/scratch img.sif torchrun train.py") == ("torchrun", "singularity exec")
    assert kind("apptainer exec --nv --bind /a img.sif python3 train.py") == ("python", "apptainer exec")
    assert kind("python -u -m torch.distributed.run --nproc-per-node=4 train.py") == ("torchrun", "")
    assert kind("python -m mypkg.train") == ("python", "")
    assert kind("train.py --lr 3") == ("python", "")
    assert kind("accelerate launch train.py") == ("accelerate", "")
    assert kind("./select_gpu python train.py") == ("python", "./select_gpu")
    assert kind("env OMP_NUM_THREADS=7 python train.py") == ("python", "")
    assert kind("tar xf data.tar -C /tmp") == ("other", "")
    assert kind("cp train.py /tmp") == ("other", "")
    assert classify_program(("bash", "-c", "$WITH_CONDA && torchrun train.py")).kind == "torchrun"
    assert classify_program(("bash", "-c", "cd /w && python3 train.py")).kind == "python"
    assert classify_program(("bash", "run.sh")).kind == "other"


def test_step_options_override_the_job() -> None:
    text = "\n".join([
        "#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
        "srun --ntasks-per-node=1 torchrun x.py", "srun -n 2 python x.py", "srun --ntasks=$SLURM_NNODES tar xf d.tar",
        "srun python x.py", "srun -N 1 -n 8 --gres=gpu:2 python x.py", "srun -n $N python x.py",
    ])
    script = parse_script(text)
    job = JobShape(script)
    steps = [StepShape(srun, job) for srun in script.sruns]
    assert [s.tasks_per_node() for s in steps] == [1, 1, 1, 4, 8, None]
    assert [s.gpus_per_node() for s in steps] == [4, 4, 4, 4, 2, 4]
