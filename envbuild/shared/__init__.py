"""The modules every package may import: each imports nothing of envbuild but the others here."""
