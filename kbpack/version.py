"""The kbpack release, in a leaf module: writers stamp it into packs, the CLI prints it."""

__version__ = "0.3.0"
