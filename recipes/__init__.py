"""Runnable recipes: `python -m recipes.NAME --help`."""
