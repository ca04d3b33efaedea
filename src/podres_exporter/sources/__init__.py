"""The I/O edge: each source reads the world and returns frozen model objects."""
