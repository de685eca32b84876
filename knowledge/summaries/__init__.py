"""Per-document summaries: one summary chunk per document version, retrieved like any
chunk and flagged as a summary. ``services`` writes them (after each ingestion, a Celery task);
``extractive`` is the LLM-free summarizer; ``llm`` asks the configured LLM. See ``docs/summaries.md``.
"""
