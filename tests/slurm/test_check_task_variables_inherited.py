"""`envrun sbatch --check`: RANK, LOCAL_RANK, NODE_RANK or GROUP_RANK exported by the batch shell from
$SLURM_PROCID, $SLURM_LOCALID or $SLURM_NODEID and inherited by an srun step. The batch shell is task 0 on the
first node and reads the task variable once; srun passes its environment to every task and sets only the SLURM_*
variables per task, so every process that reads RANK from the environment (torch.distributed's env:// init,
Lightning, scripts written for torchrun) claims rank 0. The scripts are our own, in the shapes of the course and
guide scripts of LUMI, Puhti and JUWELS."""

from __future__ import annotations

import pytest

from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.rulebase import Finding

RULE = "task_variables_inherited"

LUMI = """#!/bin/bash -l
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --time=01:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=29500
export WORLD_SIZE=$SLURM_NTASKS
"""

PUHTI = """#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --gres=gpu:v100:4
#SBATCH --time=00:15:00

module purge
module load pytorch/2.4
"""

JUWELS = """#!/bin/bash -x
#SBATCH --account=training2400
#SBATCH --partition=booster
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=12
#SBATCH --time=00:30:00

source sc_venv_template/activate.sh
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_ADDR="${MASTER_ADDR}i"
export MASTER_PORT=7010
"""


def found(text: str) -> list[Finding]:
    return [finding for finding in check_script(text, None, {}, syntax_error=None).findings if finding.rule == RULE]


def test_the_course_script_that_exports_the_ranks_before_srun() -> None:
    text = LUMI + """export RANK=$SLURM_PROCID
export LOCAL_RANK=$SLURM_LOCALID

srun singularity exec $SIF python train.py --epochs 10
"""
    (finding,) = found(text)
    assert finding.line == 20 and finding.level == "warning"
    assert finding.what == ("every task of this step inherits $RANK, $LOCAL_RANK from the batch shell, which set them "
                            "from $SLURM_PROCID, $SLURM_LOCALID once, at lines 17, 18: every task gets task 0's value")
    assert "srun passes its environment to every task" in finding.why
    assert "RANK (torch.distributed's env:// init)" in finding.why and "LOCAL_RANK (" in finding.why
    assert "distributed.html#environment-variable-initialization" in finding.source
    assert "elastic/run.html#environment-variables" in finding.source and "LightningEnvironment" in finding.source
    assert finding.fix.startswith("set them in each task: srun ... bash -c 'RANK=$SLURM_PROCID "
                                  "LOCAL_RANK=$SLURM_LOCALID exec python train.py ...' (single quotes")
    assert "torchrun" in finding.fix and "$SLURM_PROCID" in finding.fix
    # WORLD_SIZE=$SLURM_NTASKS is the same in every task: no finding of its own
    assert "WORLD_SIZE" not in finding.what


@pytest.mark.parametrize(("body", "names"), [
    # Puhti, a Lightning job over two nodes: NODE_RANK from the node's index
    (PUHTI + "export NODE_RANK=$SLURM_NODEID\nsrun python3 lightning_train.py --nodes 2\n", "$NODE_RANK"),
    # JUWELS: through a variable of the batch shell, exported later, and a default value
    (JUWELS + "MY_RANK=$SLURM_PROCID\nexport RANK=$MY_RANK\nexport LOCAL_RANK=${SLURM_LOCALID:-0}\n"
     "srun --cpu-bind=none python -u train.py\n", "$RANK, $LOCAL_RANK"),
    # set first, exported on a line of its own
    (PUHTI + "LOCAL_RANK=$SLURM_LOCALID\nexport LOCAL_RANK\nsrun python3 train.py\n", "$LOCAL_RANK"),
    # declare -x exports too
    (PUHTI + "declare -x RANK=$SLURM_PROCID\nsrun python3 train.py\n", "$RANK"),
    # an assignment before srun on its line: srun's environment, with the batch shell's value
    (PUHTI + "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID srun python3 train.py\n", "$RANK, $LOCAL_RANK"),
    # computed from two task variables: one node, four tasks, so $SLURM_LOCALID differs
    (PUHTI.replace("--nodes=2", "--nodes=1") + "export RANK=$((SLURM_NODEID * 4 + SLURM_LOCALID))\n"
     "srun python3 train.py\n", "$RANK"),
    # several exports on one line, as LUMI's guides write them
    (LUMI + "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID\nsrun singularity exec $SIF python train.py\n",
     "$RANK, $LOCAL_RANK"),
    # inside an if block, and a step started in the background
    (PUHTI + "if [ -n \"$SLURM_JOB_ID\" ]; then\n  export RANK=$SLURM_PROCID\nfi\nsrun python3 train.py &\nwait\n",
     "$RANK"),
    # --export lists that pass it: ALL, or its name
    (PUHTI + "export RANK=$SLURM_PROCID\nsrun --export=ALL,OMP_NUM_THREADS=10 python3 train.py\n", "$RANK"),
    (PUHTI + "export RANK=$SLURM_PROCID\nsrun --export=PATH,RANK python3 train.py\n", "$RANK"),
    # #SBATCH --export=NONE, undone for the steps as sbatch(1) advises
    (PUHTI.replace("#SBATCH --time", "#SBATCH --export=NONE\n#SBATCH --time") +
     "export SLURM_EXPORT_ENV=ALL\nexport RANK=$SLURM_PROCID\nsrun python3 train.py\n", "$RANK"),
    # a container that keeps the host's environment out still gets APPTAINERENV_NAME as NAME
    (LUMI + "export APPTAINERENV_RANK=$SLURM_PROCID\nsrun singularity exec --cleanenv $SIF python train.py\n",
     "$APPTAINERENV_RANK"),
])
def test_every_way_a_task_inherits_task_0s_rank(body: str, names: str) -> None:
    (finding,) = found(body)
    assert finding.what.startswith(f"every task of this step inherits {names} from the batch shell"), finding.what
    assert "unless" not in finding.what


def test_a_script_the_check_cannot_read_gets_it_as_a_condition() -> None:
    (finding,) = found(PUHTI + "export RANK=$SLURM_PROCID\nsrun ./run_rank.sh --epochs 10\n")
    assert finding.what.endswith("every task gets task 0's value, unless run_rank.sh sets it for each task itself")
    assert "export it in run_rank.sh, which each task runs" in finding.fix
    (wrapped,) = found(LUMI + "export LOCAL_RANK=$SLURM_LOCALID\nsrun ./select_gpu python train.py\n")
    assert wrapped.what.endswith(", unless select_gpu sets it for each task itself")
    (shell,) = found(PUHTI + "export RANK=$SLURM_PROCID\nsrun bash job_step.sh\n")
    assert "unless job_step.sh sets it" in shell.what
    (unknown,) = found(PUHTI + "export RANK=$SLURM_PROCID\nsrun $TRAIN_COMMAND\n")  # set where sbatch runs
    assert "unless $TRAIN_COMMAND sets it" in unknown.what


def test_a_job_submitted_with_sbatch_here_document() -> None:
    driver = "#!/bin/bash\nsbatch <<EOF\n" + PUHTI + "export RANK=\\$SLURM_PROCID\nsrun python3 train.py\nEOF\n"
    (finding,) = found(driver)
    assert finding.line == 15 and "$RANK" in finding.what


@pytest.mark.parametrize("body", [
    # set in each task: its own value
    PUHTI + "srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec python3 train.py'\n",
    PUHTI + "export RANK=$SLURM_PROCID\nsrun bash -c 'export RANK=$SLURM_PROCID; python3 train.py'\n",
    LUMI + "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID\n"
    "srun singularity exec $SIF bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID; python train.py'\n",
    LUMI + "export RANK=$SLURM_PROCID\nsrun singularity exec --env RANK=\\$SLURM_PROCID $SIF python train.py\n",
    # a launcher sets RANK, LOCAL_RANK and GROUP_RANK in every worker it starts
    JUWELS.replace("--ntasks-per-node=4", "--ntasks-per-node=1") + "export NODE_RANK=$SLURM_NODEID\n"
    "export RANK=$SLURM_PROCID\nsrun torchrun --nnodes=4 --nproc-per-node=4 --rdzv-backend=c10d "
    "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT train.py\n",
    PUHTI + "export LOCAL_RANK=$SLURM_LOCALID\nsrun --ntasks-per-node=1 python3 -m torch.distributed.run "
    "--nproc-per-node=4 train.py\n",
    # not passed to the tasks
    PUHTI + "export RANK=$SLURM_PROCID\nsrun --export=NONE python3 train.py\n",
    PUHTI + "export RANK=$SLURM_PROCID\nsrun --export=PATH,HOME,MASTER_ADDR python3 train.py\n",
    PUHTI.replace("#SBATCH --time", "#SBATCH --export=NONE\n#SBATCH --time") +
    "export RANK=$SLURM_PROCID\nsrun python3 train.py\n",
    LUMI + "export RANK=$SLURM_PROCID\nsrun singularity exec --cleanenv $SIF python train.py\n",
    # the batch shell keeps it to itself
    PUHTI + "RANK=$SLURM_PROCID\nsrun python3 train.py\n",
    PUHTI + "export RANK=$SLURM_PROCID\nunset RANK\nsrun python3 train.py\n",
    PUHTI + "export RANK=$SLURM_PROCID\nexport -n RANK\nsrun python3 train.py\n",
    # single quotes: the text $SLURM_PROCID, not task 0's value
    PUHTI + "export RANK='$SLURM_PROCID'\nsrun python3 train.py\n",
    # the wrapper written by the job itself, in a quoted here-document: its lines are no commands of the batch shell
    LUMI + "cat > run_rank.sh <<'WRAPPER'\n#!/bin/bash\nexport RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID\n"
    "exec python train.py \"$@\"\nWRAPPER\nchmod +x run_rank.sh\nsrun singularity exec $SIF ./run_rank.sh\n",
    # the same value in every task
    LUMI + "export LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE\nsrun singularity exec $SIF python train.py\n",
    # one task, or one task per node for the local rank
    PUHTI + "export RANK=$SLURM_PROCID\nsrun -n 1 python3 prepare_data.py\n",
    PUHTI.replace("--ntasks-per-node=4", "--ntasks-per-node=1") + "export LOCAL_RANK=$SLURM_LOCALID\n"
    "srun python3 train.py\n",
    PUHTI.replace("--nodes=2", "--nodes=1") + "export NODE_RANK=$SLURM_NODEID\nsrun python3 train.py\n",
    # a program that reads no rank: nothing to say
    PUHTI + "export RANK=$SLURM_PROCID\nsrun hostname\nsrun nvidia-smi -L\n",
    # exported only after the step
    PUHTI + "srun python3 train.py\nexport RANK=$SLURM_PROCID\n",
])
def test_where_each_task_has_its_own_rank_or_none(body: str) -> None:
    assert found(body) == []


def test_a_rank_named_on_the_srun_line_is_the_other_rules_finding() -> None:
    report = check_script(PUHTI + "export RANK=$SLURM_PROCID\nexport LOCAL_RANK=$SLURM_LOCALID\n"
                          "srun python3 train.py --rank $RANK\n", None, {}, syntax_error=None)
    by_rule = {finding.rule: finding for finding in report.findings}
    assert "$RANK on the srun line" in by_rule["task_variables_in_batch_shell"].what
    assert by_rule[RULE].what.startswith("every task of this step inherits $LOCAL_RANK from")


def test_the_suggested_per_task_form_is_clean() -> None:
    before = PUHTI + "export RANK=$SLURM_PROCID\nexport LOCAL_RANK=$SLURM_LOCALID\nsrun python3 train.py\n"
    (finding,) = found(before)
    after = before.replace("srun python3 train.py", "srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
                           "exec python3 train.py'")
    assert "bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec python3 train.py'" in finding.fix
    report = check_script(after, None, {}, syntax_error=None)
    assert [f.rule for f in report.findings if f.level != "info"] == []
