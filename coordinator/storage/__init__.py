"""coordinator/storage package."""
