"""Walks kept beyond one answer: the facts a WalkingRAG walk extracts (memory, with provenance),
the path it took (queries, chunks, false starts), the query-time graph of facts and entities,
and walks a person steers (pause, edit, resume, stop).

Seed ``walkingrag-multi-turn.txt``: extracted facts are "a good source of information to be
re-embedded and searched instead of the source document"; the walk tells "the causal paths we
take through the document"; it builds "a knowledge graph of the document ... at query time"; and
"users can interrupt cycles, modify outputs or questions, and return control to the system".
"""
