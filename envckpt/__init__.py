"""envckpt."""
