"""A run's context and resumption from any process."""
