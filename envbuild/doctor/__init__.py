"""`envrun doctor`: the silent failures of containerised multi-GPU training, found before the allocation burns.

Flow, like the rest of envbuild: facts are gathered once (the host or each node as a `HostRecord`, the image as
`ImageFacts`, the job as an `Allocation`), the checks are pure functions of those facts returning findings,
and the report renders them. Tests give recorded hosts and stand-in images to the same checks.
"""
