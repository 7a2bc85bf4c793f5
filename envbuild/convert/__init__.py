"""Apptainer definition files and Dockerfiles to and from specs (`envbuild import` / `envbuild export`): one module per format."""
