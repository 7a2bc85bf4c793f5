"""Lock files: every Python package of a spec pinned, with hashes, for its target; the file format, when a lock is
stale, what a build does with it (uv's conventions) and the uv command that resolves one."""
