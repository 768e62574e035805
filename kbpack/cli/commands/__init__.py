"""One module per command family; ``kbpack.cli.main`` imports each only when its command runs."""
