"""Text below everything else: canonical text, the in-memory document, the tokenizer and
analyzers, and the stopword lists. Imports nothing of kbpack but ``errors``.
"""

__all__ = ["analyze", "canonical", "document", "stopwords"]
