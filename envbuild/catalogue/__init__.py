"""The site catalogue (`envbuild catalogue`): a static HTML page and JSON of what a set of images holds,
read through envbuild.inventory without starting a container."""
