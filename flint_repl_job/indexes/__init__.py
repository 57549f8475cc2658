"""Flint indexes in the job: their metadata, how their contents are built, and the statements about them."""
