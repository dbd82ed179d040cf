"""Each recipe end to end against the fake: what its filters keep, what its exports hold."""
