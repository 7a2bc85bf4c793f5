"""`envrun sbatch --check`: $SLURM_NODEID, $SLURM_PROCID and $SLURM_LOCALID written where the batch shell expands
them on an srun line. The batch shell is task 0 on the first node (0 for each), and srun's command line is
expanded before srun starts the tasks, so every node or task gets 0: `srun accelerate launch --machine_rank
$SLURM_NODEID` makes every node claim rank 0. Read as bash quotes: single quotes and `\\$` leave them to each
task."""

from __future__ import annotations

import pytest

from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.rulebase import Finding

HEAD = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=01:00:00

head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
"""
RULE = "task_variables_in_batch_shell"


def found(text: str) -> list[Finding]:
    return [finding for finding in check_script(text, None, {}, syntax_error=None).findings if finding.rule == RULE]


def apply(text: str, edit: tuple[int, str]) -> str:
    lines = text.split("\n")
    lines[edit[0] - 1] = edit[1]
    return "\n".join(lines)


def test_accelerate_machine_rank_expanded_in_the_batch_shell() -> None:
    text = HEAD + "srun accelerate launch --num_machines 2 --machine_rank $SLURM_NODEID train.py\n"
    (finding,) = found(text)
    assert finding.line == 8 and finding.level == "warning"
    assert finding.what == ("$SLURM_NODEID on the srun line is expanded by the batch shell, once: every node gets 0, "
                            "so every node claims rank 0")
    assert "srun sets it in each task (the node's index in the step)" in finding.why
    assert "OUTPUT ENVIRONMENT VARIABLES" in finding.source
    assert "bash -c '... $SLURM_NODEID ...' (single quotes)" in finding.fix and "\\$SLURM_NODEID" in finding.fix
    assert finding.edit == (8, 'srun bash -c "accelerate launch --num_machines 2 --machine_rank \\$SLURM_NODEID '
                               'train.py"')
    fixed = apply(text, finding.edit)
    assert found(fixed) == []
    report = check_script(fixed, None, {}, syntax_error=None)
    assert [f.rule for f in report.findings if f.level != "info"] == []


@pytest.mark.parametrize("line", [
    'srun bash -c "torchrun --nnodes=2 --node_rank=$SLURM_NODEID --master_addr=$head_node train.py"',
    "srun torchrun --nnodes=2 --node_rank=${SLURM_NODEID} --master_addr=$head_node train.py",
    'srun bash -c "\n    torchrun --nnodes=2 \\\n    --node_rank=$SLURM_NODEID train.py"',
    "srun --export=ALL,NODE=$SLURM_NODEID python train.py",
    "cd /scratch && srun accelerate launch --machine_rank=$SLURM_NODEID train.py",
])
def test_every_place_the_batch_shell_expands_it(line: str) -> None:
    (finding,) = found(HEAD + line + "\n")
    assert "$SLURM_NODEID" in finding.what


@pytest.mark.parametrize("line", [
    "srun bash -c 'accelerate launch --machine_rank $SLURM_NODEID train.py'",
    'srun bash -c "accelerate launch --machine_rank \\$SLURM_NODEID train.py"',
    "srun bash -c 'accelerate launch --machine_rank $SLURM_NODEID --main_process_ip '\"$head_node\"' train.py'",
    "srun ./run_node.sh  # reads $SLURM_NODEID itself",
    "echo $SLURM_NODEID; srun python train.py",
    "srun python train.py && echo rank $SLURM_PROCID done",
    'srun bash -c "torchrun --rdzv_conf=is_host=\\$(( SLURM_NODEID == 0 ? 1 : 0 )) train.py"',
])
def test_left_to_each_task_or_outside_the_srun_command(line: str) -> None:
    assert found(HEAD + line + "\n") == []


def test_only_where_the_step_has_several_of_what_the_variable_counts() -> None:
    one_node = HEAD.replace("--nodes=2", "--nodes=1")
    assert found(one_node + "srun accelerate launch --machine_rank $SLURM_NODEID train.py\n") == []
    (rank,) = found(HEAD + "srun python train.py --rank $SLURM_PROCID\n")  # two nodes, a task each
    assert rank.what.startswith("$SLURM_PROCID on the srun line is expanded") and "every task gets 0" in rank.what
    assert found(HEAD + "srun python train.py --local-rank $SLURM_LOCALID\n") == []  # one task per node
    four = one_node.replace("--ntasks-per-node=1", "--ntasks-per-node=4")
    (local,) = found(four + "srun python train.py --local-rank $SLURM_LOCALID --rank $SLURM_PROCID\n")
    assert local.what.startswith("$SLURM_LOCALID, $SLURM_PROCID on the srun line are expanded")
    assert found(four + "srun -n1 python train.py --rank $SLURM_PROCID\n") == []


def test_a_double_quoted_argument_of_another_program_gets_no_edit() -> None:
    (finding,) = found(HEAD + 'srun python train.py "--rank=$SLURM_PROCID"\n')
    assert finding.edit is None  # `\\$` there would hand python the text $SLURM_PROCID


def test_a_double_quoted_bash_c_string_gets_the_backslash() -> None:
    text = HEAD + 'srun bash -c "torchrun --nnodes=2 --node_rank=$SLURM_NODEID --master_addr=$head_node train.py"\n'
    (finding,) = found(text)
    assert finding.edit == (8, 'srun bash -c "torchrun --nnodes=2 --node_rank=\\$SLURM_NODEID --master_addr=$head_node '
                               'train.py"')
    assert found(apply(text, finding.edit)) == []


def test_in_a_job_submitted_with_sbatch_here_document() -> None:
    """In an unquoted here-document `\\$SLURM_NODEID` reaches the job as $SLURM_NODEID, which the job's batch shell
    then expands: still once for all nodes."""
    driver = ("#!/bin/bash\nsbatch <<EOF\n" + HEAD + "srun accelerate launch --machine_rank \\$SLURM_NODEID train.py\n"
              "EOF\n")
    (finding,) = found(driver)
    assert finding.line == 10


# --- through a variable of the batch shell ------------------------------------------------------------------------


def test_a_variable_the_batch_shell_set_from_a_task_variable_holds_task_0s_value() -> None:
    text = HEAD + "NODE_RANK=$SLURM_NODEID\nsrun torchrun --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=4 train.py\n"
    (finding,) = found(text)
    assert finding.line == 9 and finding.what == (
        "$NODE_RANK on the srun line holds $SLURM_NODEID as the batch shell read it at line 8, once: every node gets 0, "
        "so every node claims rank 0")
    assert "bash -c 'NODE_RANK=$SLURM_NODEID; ...'" in finding.fix and finding.edit is None


def test_an_exported_one_is_task_0s_value_in_single_quotes_too_and_chains_are_followed() -> None:
    text = HEAD + "export RANK=${SLURM_NODEID}\nMY_RANK=\"$RANK\"\nsrun bash -c 'torchrun --node_rank=$RANK x.py'\n" \
        "srun torchrun --node_rank=$MY_RANK x.py\n"
    assert [(f.line, f.what.split(" on ")[0]) for f in found(text)] == [(10, "$RANK"), (11, "$MY_RANK")]


@pytest.mark.parametrize("body", [
    # set inside each task: its own value
    "srun bash -c 'R=$SLURM_NODEID; torchrun --node_rank=$R x.py'\n",
    # single quotes in the batch shell: the text, not task 0's value
    "R='$SLURM_NODEID'\nsrun bash -c \"eval torchrun --node_rank=$R x.py\"\n",
    # not exported and read by the tasks in single quotes: unset there, another matter
    "R=$SLURM_NODEID\nsrun bash -c 'echo $R'\n",
    # set again from something else before the srun line
    "R=$SLURM_NODEID\nR=3\nsrun torchrun --node_rank=$R x.py\n",
    # one task on one node: task 0's value is the only one
    "R=$SLURM_NODEID\nsrun --nodes=1 --ntasks=1 torchrun --node_rank=$R x.py\n",
])
def test_what_is_not_task_0s_value_everywhere(body: str) -> None:
    assert found(HEAD + body) == []


def test_every_assignment_of_an_export_line_is_read() -> None:
    """`export WORLD_SIZE=$SLURM_NTASKS RANK=$SLURM_PROCID`: the second assignment is one of the batch shell's too."""
    text = HEAD + "export WORLD_SIZE=$SLURM_NTASKS RANK=$SLURM_PROCID\nsrun python train.py --rank $RANK\n"
    (finding,) = found(text)
    assert finding.what.startswith("$RANK on the srun line holds $SLURM_PROCID as the batch shell read it at line 8")


def test_a_wrapper_the_job_writes_in_a_quoted_here_document_is_no_assignment_of_the_batch_shell() -> None:
    text = HEAD + "cat > run_node.sh <<'EOF'\nexport R=$SLURM_NODEID\nEOF\nsrun bash -c 'torchrun --node_rank=$R x.py'\n"
    assert found(text) == []
