"""The pure build planners: (validated spec, recipe, host facts) -> the exact actions of a build, golden-tested."""
