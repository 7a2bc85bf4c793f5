"""System recipes: the site knowledge under recipes/*.yaml (GPUs, cores, binds, env, wheel indexes, launch
rules), each fact citing its public source: the schema, loading with its cache, detection of the site."""
