"""Primitives every other part builds on: errors, paths, files, secrets, states, formatting."""
