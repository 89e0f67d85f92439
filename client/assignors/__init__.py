"""client/assignors package."""
