"""The InF-IR recipe: training tuples with poisoned instructions and queries."""
