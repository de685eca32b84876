"""Query rewriting stages: rephrase, expand (LLM OR-expansion or RM3) and HyDE."""
