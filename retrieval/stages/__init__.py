"""The stages a retrieval/answer pipeline is made of (see ``retrieval.pipeline``).

The WalkingRAG composite stage lives with the rest of the walks, in ``retrieval.walks.stage``.
"""
