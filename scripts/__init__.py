"""Companion command-line scripts over spoteval: `python -m scripts.NAME`."""
