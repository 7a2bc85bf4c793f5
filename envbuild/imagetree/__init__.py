"""Paths inside an image tree resolved as the container would see them (its root as `/`), for every read and
write a build or a reader makes there."""
