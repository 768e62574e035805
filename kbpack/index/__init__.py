"""What a build computes from documents before a pack is written: chunks with exact offsets,
sentence pieces, copies of one passage, and BM25 postings.
"""

__all__ = ["chunk", "copies", "pieces", "postings"]
