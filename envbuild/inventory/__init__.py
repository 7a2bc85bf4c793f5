"""Image inventory: what is inside .sif images (Python environments, packages, labels, scripts),
read straight from the file: SIF header -> squashfs partition -> a few directories and metadata files; and what a
registry image's config says (registryconfig.py), read without pulling the image.
No container is started and no runtime is needed, except for the optional `--via-runtime` path."""
