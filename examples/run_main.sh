#!/usr/bin/env bash
# The main job: provision this machine, build the reference image from envs/local-cpu-pytorch.yaml,
# and run a 2-process DDP training in it under the local Slurm, through envrun.
#   bash examples/run_main.sh            (as root on Debian bookworm)
# The image goes to build/local-cpu-pytorch.sif; a second run reuses the cached base and packages.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash provision/all.sh
image=${ENVBUILD_IMAGE:-build/local-cpu-pytorch.sif}
if [[ ! -f $image || envs/local-cpu-pytorch.yaml -nt $image ]]; then
    bin/envbuild build envs/local-cpu-pytorch.yaml -o "$image"
else
    echo "using the existing $image (delete it, or touch the spec, to rebuild)"
fi
bin/envrun --image "$image" --explain srun torchrun examples/ddp_minimal.py --steps 50
