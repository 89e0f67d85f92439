"""coordinator/runtime package."""
