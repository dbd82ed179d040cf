"""ifsynth's package list, derived rather than written by hand: every folder holding an ``__init__.py`` under
the four top folders, installed as ``ifsynth.<folder>`` (pyproject.toml's package-dir maps each top folder)."""

from setuptools import find_packages, setup

TOP = ("flows", "prompts", "schemas", "warehouse")

setup(packages=[f"ifsynth.{name}" for name in find_packages(include=[f"{top}*" for top in TOP])])
