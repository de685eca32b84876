"""The stages a retrieval/answer pipeline is made of (see ``retrieval.pipeline``)."""
