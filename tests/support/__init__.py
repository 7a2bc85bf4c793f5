"""Helpers the tests share: fixtures, stand-ins and small images made without apptainer (not tests)."""
