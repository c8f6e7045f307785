"""Atropos environments shipped with hermes-rl (discovered by AST; run as `python FILE serve`)."""
