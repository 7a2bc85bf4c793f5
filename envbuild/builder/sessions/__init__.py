"""One `envbuild build` or `envbuild lock` of a spec: the request, the lock decision and resolution, the store's
trust, and the executor run."""
