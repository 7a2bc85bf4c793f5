"""The SIF container format: reading a SIF's header and partitions, writing one from a sandbox (and a layered
one over a stored image), the squashfs compressions, and the manifest of what a tree held."""
