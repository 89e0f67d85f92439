"""coordinator/core package."""
