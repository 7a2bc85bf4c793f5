"""The image as a Jupyter kernel: `envrun kernel install/list/remove/run` and `envrun shell`.

A kernelspec written by `envrun kernel install` runs `envrun kernel run KERNEL.json {connection_file}`: the
kernel goes through envrun's own launch path (binds, $WITH_CONDA, overlays, the recipe's environment, thread
counts for the CPUs the process may use), so it gets what `envrun python` gets. Pure planning lives in
envbuild.kernel.kernelspec; the rest (probing the image, building the ipykernel overlay, writing files, the kernel
process itself) in the modules next to it.
"""
