"""The shared hardware model and catalogs. Stdlib only: ships inside the agent payload."""
