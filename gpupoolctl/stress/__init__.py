"""stress."""
