"""Which layers may run in low precision: per-layer sensitivity and the precision policy built on it."""
