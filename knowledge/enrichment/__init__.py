"""Ingest-side enrichment of chunks: keyphrases, named entities and, with an LLM, the questions a chunk answers.

``keyphrases`` extracts keyphrases (YAKE), ``entities`` named entities (spaCy's small English
pipeline, when the tenant's ``enrichment_entities`` switch is on), ``questions`` asks an LLM for
doc2query-style questions, ``services`` stores them on the chunk (``models.ChunkEnrichment``)
with their own BM25 postings and statistics, and ``retrieval.stages.retrieve.enrichment`` scores
that field. See ``docs/enrichment.md``.
"""
