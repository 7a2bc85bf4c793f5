"""What envbuild and envrun read about the machine they run on: its CPUs, GPUs and architecture, the container
runtime and its version, pip's configuration, envrun's own cache, and how a Python of ours is started."""
