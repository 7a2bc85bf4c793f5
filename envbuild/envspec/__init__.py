"""The environment spec (envs/*.yaml): its validated model, its loader with located errors, its JSON schema."""
