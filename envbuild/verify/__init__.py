"""`envbuild verify`: does an image or an overlay hold what its build record, its lock and its spec say."""
