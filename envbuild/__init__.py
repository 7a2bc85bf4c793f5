"""envbuild: reproducible Apptainer/Singularity environments for ML on HPC systems."""

__version__ = "0.1.0"
