"""SLURM_* variables of real job shapes, for golden launch plans: the course and user-guide examples
(CSC ml-multi and pytorch, the LUMI AI guide and workshop, JSC's course) with their #SBATCH lines.

Which variables exist follows what Slurm 22.05 sets, observed on the local test cluster
(envbuild/launch/allocation.py lists it): SLURM_NTASKS only when tasks were asked for, SLURM_CPUS_PER_TASK only with
-c, SLURM_GPUS_PER_NODE only with --gpus-per-node, SLURM_GPUS_ON_NODE/SLURM_JOB_GPUS/CUDA_VISIBLE_DEVICES for
any GPU request. Job ids and node names are made up. LUMI and JUWELS count hardware threads as Slurm CPUs
(2 per core), so their CPU counts per node are twice the cores."""

from __future__ import annotations

from envbuild.host.node import HostNode

# The node envrun plans on in tests: 2 CPUs in its affinity, no GPU (golden plans and scripts were made with it).
HOST = HostNode(cpus=2, why={"cpus": "2 CPUs in this process's affinity"})


def job(nodes: int = 1, partition: str = "", cluster: str = "", *, ntasks_per_node: int | None = None,
        ntasks: int | None = None, cpus_per_task: int | None = None, cpus_per_node: int, gpus: int = 0,
        gpus_per_node_option: bool = False, nodelist: str = "n001", job_id: str = "4242", **extra: str) -> dict[str, str]:
    """The variables of a batch job of that shape."""
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
           "SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_PARTITION": partition,
           "SLURM_JOB_CPUS_PER_NODE": f"{cpus_per_node}(x{nodes})" if nodes > 1 else str(cpus_per_node),
           "SLURM_CPUS_ON_NODE": str(cpus_per_node), "USER": "alice"}
    if cluster:
        env["SLURM_CLUSTER_NAME"] = cluster
    if ntasks_per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(ntasks_per_node)
        ntasks = ntasks_per_node * nodes
    if ntasks is not None:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
        per_node = ntasks // nodes
        env["SLURM_TASKS_PER_NODE"] = f"{per_node}(x{nodes})" if nodes > 1 else str(per_node)
    else:
        env["SLURM_TASKS_PER_NODE"] = f"1(x{nodes})" if nodes > 1 else "1"
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if gpus:
        devices = ",".join(map(str, range(gpus)))
        env.update(SLURM_GPUS_ON_NODE=str(gpus), SLURM_JOB_GPUS=devices, CUDA_VISIBLE_DEVICES=devices,
                   GPU_DEVICE_ORDINAL=devices)
        if gpus_per_node_option:
            env["SLURM_GPUS_PER_NODE"] = str(gpus)
    env.update(extra)
    return env


# CSC (docs.csc.fi support/tutorials/ml-multi, apps/pytorch). Puhti: 40 cores, 4 V100; Mahti: 128 cores, 4 A100.
PUHTI_1_GPU = job(partition="gpu", cluster="puhti", ntasks=1, cpus_per_task=10, cpus_per_node=10, gpus=1,
                  nodelist="r01g02")                      # --ntasks=1 --cpus-per-task=10 --gres=gpu:v100:1
PUHTI_2_GPUS = job(partition="gpu", cluster="puhti", ntasks=1, cpus_per_task=20, cpus_per_node=20, gpus=2,
                   nodelist="r01g02")                     # --ntasks=1 --cpus-per-task=20 --gres=gpu:v100:2
PUHTI_4_GPUS_TASK_PER_GPU = job(partition="gpu", cluster="puhti", ntasks_per_node=4, cpus_per_task=10, cpus_per_node=40,
                                gpus=4, nodelist="r01g02")  # --ntasks-per-node=4 --cpus-per-task=10 --gres=gpu:v100:4
PUHTI_4_GPUS = job(partition="gpu", cluster="puhti", ntasks=1, cpus_per_task=40, cpus_per_node=40, gpus=4,
                   nodelist="r01g02")                     # --ntasks=1 --cpus-per-task=40 --gres=gpu:v100:4
PUHTI_2_FULL_NODES = job(2, "gpu", "puhti", ntasks_per_node=1, cpus_per_task=40, cpus_per_node=40, gpus=4,
                         nodelist="r01g[02-03]")          # --nodes=2 --ntasks-per-node=1 --cpus-per-task=40 --gres=gpu:v100:4
MAHTI_GPUSMALL_2_GPUS = job(partition="gpusmall", cluster="mahti", ntasks=1, cpus_per_task=64, cpus_per_node=64, gpus=2,
                            nodelist="g1101")            # --partition=gpusmall --ntasks=1 --cpus-per-task=64 --gres=gpu:a100:2
MAHTI_2_NODES = job(2, "gpumedium", "mahti", ntasks_per_node=1, cpus_per_task=128, cpus_per_node=128, gpus=4,
                    nodelist="g[1101-1102]")              # --nodes=2 --ntasks-per-node=1 --cpus-per-task=128 --gres=gpu:a100:4

# LUMI-G (docs.lumi-supercomputer.eu runjobs/lumig-job; LUMI AI guide): 56 usable cores (112 threads), 8 GCDs.
LUMI_SMALL_G_1_GCD = job(partition="small-g", cluster="lumi", ntasks_per_node=1, cpus_per_task=7, cpus_per_node=14,
                         gpus=1, gpus_per_node_option=True, nodelist="nid005123")
LUMI_SMALL_G_2_GCDS = job(partition="small-g", cluster="lumi", ntasks_per_node=2, cpus_per_task=7, cpus_per_node=28,
                          gpus=2, gpus_per_node_option=True, nodelist="nid005123")
LUMI_FULL_NODE = job(partition="standard-g", cluster="lumi", ntasks_per_node=8, cpus_per_task=7, cpus_per_node=112,
                     gpus=8, gpus_per_node_option=True, nodelist="nid005123", job_id="7654321", SLURM_MEM_PER_NODE="491520")
LUMI_FULL_NODE_4_TASKS = job(partition="standard-g", cluster="lumi", ntasks_per_node=4, cpus_per_task=14,
                             cpus_per_node=112, gpus=8, gpus_per_node_option=True, nodelist="nid005123")
LUMI_4_NODES = job(4, "standard-g", "lumi", ntasks_per_node=1, cpus_per_node=112, gpus=8, gpus_per_node_option=True,
                   nodelist="nid[005123-005126]", job_id="7654400")
LUMI_2_NODES = job(2, "standard-g", "lumi", ntasks_per_node=1, cpus_per_node=112, gpus=8, gpus_per_node_option=True,
                   nodelist="nid[005123-005124]", job_id="7654401")
LUMI_SMALL_G_NO_TASKS = job(partition="small-g", cluster="lumi", cpus_per_node=2, gpus=2, gpus_per_node_option=True,
                            nodelist="nid005123")       # --gpus-per-node=2 and nothing else: 1 CPU per task

# JUWELS Booster (JSC course run_ddp.sh): 48 cores (96 threads), 4 A100.
JUWELS_1_GPU = job(partition="booster", cluster="juwels", ntasks_per_node=1, cpus_per_task=24, cpus_per_node=24, gpus=1,
                   nodelist="jwb0097")                   # --ntasks-per-node=1 --cpus-per-task=24 --gres=gpu:1
JUWELS_4_GPUS = job(partition="booster", cluster="juwels", ntasks_per_node=4, cpus_per_task=24, cpus_per_node=96, gpus=4,
                    nodelist="jwb0097")                  # --ntasks-per-node=4 --cpus-per-task=24 --gres=gpu:4
JUWELS_2_NODES = job(2, "booster", "juwels", ntasks_per_node=4, cpus_per_task=24, cpus_per_node=96, gpus=4,
                     nodelist="jwb[0097-0098]", job_id="11112222")

# CSC Roihu GPU (docs.csc.fi example-job-scripts-roihu): 4 GH200 per node, 288 Grace cores (no SMT: Slurm CPUs =
# cores), --gres=gpu:gh200:4; one torchrun launcher with the node's 288 CPUs, or 4 tasks x 72 CPUs.
ROIHU_1_NODE = job(partition="gpumedium", cluster="roihu", ntasks_per_node=1, cpus_per_task=288, cpus_per_node=288,
                   gpus=4, nodelist="g1101", job_id="5150001")   # --ntasks-per-node=1 --cpus-per-task=288
ROIHU_2_NODES = job(2, "gpumedium", "roihu", ntasks_per_node=4, cpus_per_task=72, cpus_per_node=288, gpus=4,
                    nodelist="g[1101-1102]", job_id="5150002")   # --ntasks-per-node=4 --cpus-per-task=72 (CSC's example)

# JSC JUPITER Booster: 4 GH200 per node, 288 Grace cores, --gres=gpu:4, whole nodes.
JUPITER_1_NODE = job(partition="booster", cluster="jupiter", ntasks_per_node=1, cpus_per_task=288, cpus_per_node=288,
                     gpus=4, nodelist="jpbo-001-01", job_id="880001")
JUPITER_2_NODES = job(2, "booster", "jupiter", ntasks_per_node=1, cpus_per_task=288, cpus_per_node=288, gpus=4,
                      nodelist="jpbo-001-[01-02]", job_id="880002")

# Any cluster (the local recipe): a part of a node (-c 1), and a whole 16-CPU node without GPUs (--exclusive).
LOCAL_PARTIAL = job(partition="debug", cluster="envbuild-local", cpus_per_task=1, cpus_per_node=1, nodelist="vm")
LOCAL_FULL = job(partition="debug", cluster="envbuild-local", cpus_per_node=16, nodelist="vm", SLURM_TASKS_PER_NODE="16")
LOCAL_TWO_NODES_ONE_CPU = job(2, "debug", "envbuild-local", ntasks_per_node=1, cpus_per_task=1, cpus_per_node=1,
                              nodelist="node[1-2]")
