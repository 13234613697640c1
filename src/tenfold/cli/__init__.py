"""Command-line interface: one module per command; `main.py` only registers them."""
