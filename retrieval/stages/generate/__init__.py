"""Generate stage: the answer, written by the LLM with citations or extracted from the passages."""
