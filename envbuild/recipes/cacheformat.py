"""The format of envrun's cached recipes: a digest of what decides a recipe's cached data (the fields, types,
defaults, constraints and validators of envbuild.recipes.schema), part of every recipe cache file's name, so
that a cache written under another schema is never read.

Generated from envbuild.recipes.schema by envbuild.recipes.fromschema; do not edit: run `.venv/bin/python -m envbuild.recipes.fromschema`.
A constant, not computed: envrun reads it on every launch, without pydantic.
"""

CACHE_FORMAT = "c41a71dbfd09c30d"
