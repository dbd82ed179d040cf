"""Jinja templates, prompts/<recipe>/<stage>.j2, and the registry that loads, renders and hashes them."""
