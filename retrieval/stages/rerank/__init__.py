"""Rerank stages: reorder retrieved candidates by a finer judgement than the fused score.

``llm_scoring`` (SuperRAG, seed ``superrag.txt``): the LLM grades every candidate against the
question and quotes the part that answers it; without an LLM, the fused score and the
best-matching sentence stand in.
"""
