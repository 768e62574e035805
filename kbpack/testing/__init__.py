"""Deliberate test support shipped with kbpack: the structure-aware fuzzers of the pack
reader, ``verify`` and the extractors (``bench/fuzz.py`` runs them). Not used by the product.
"""

__all__ = ["fuzz"]
