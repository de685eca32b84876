"""Duplicates of a tenant's documents.

Exact duplicates are found at ingestion (``DocumentVersion.duplicate_of``); near-duplicates by
MinHash + LSH after each ingestion (``near`` for the technique, ``services`` for the writes,
``selectors`` for retrieval's reads, ``models`` for the records, ``admin`` for curation).
See ``docs/dedup.md``.
"""
