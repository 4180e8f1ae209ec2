"""partition."""
