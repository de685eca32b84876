"""Walks kept beyond one answer: the facts a WalkingRAG walk extracts (memory, with provenance),
the path it took (queries, chunks, false starts), the query-time graph of facts and entities,
and walks a person steers (pause, edit, resume, stop).

Seed ``walkingrag-multi-turn.txt``: extracted facts are "a good source of information to be
re-embedded and searched instead of the source document"; the walk tells "the causal paths we
take through the document"; it builds "a knowledge graph of the document ... at query time"; and
"users can interrupt cycles, modify outputs or questions, and return control to the system".

Where each part lives:

==============  ============================================================================
``stage``       the WalkingRAG composite stage: rounds until the walk stops, then the answer
``rounds``      one round: read chunks, extract facts, decide whether the walk stops
``reading``     the chunks each query reads, the entity hop, the answer's passages
``extraction``  the round's LLM call: facts, sufficiency, where to look next
``config``      the stage's settings (``WalkConfig``)
``recorder``    what a running walk keeps (its row, path, facts) and its pauses
``steering``    walks a person steers: start, pause, edit, resume, stop, recovery
``apis``        the REST API of walks and facts (the portal's pages: ``portal/walks.py``)
``memory``      facts kept as memory: store, retire, correct, the memory retriever
``selectors``   reads: facts visible to an asker, a walk's state and paths
``graph``       the query-time graph of facts and entities
``models``      ``Walk``, ``WalkStep``, ``Fact`` (app label ``retrieval``)
``admin``       the admin of facts
==============  ============================================================================
"""
