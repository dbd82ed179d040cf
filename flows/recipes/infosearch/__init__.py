"""The InfoSearch recipe."""
