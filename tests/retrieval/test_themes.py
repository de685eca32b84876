"""Themes packing: a broad question gets the best chunk of each theme, not five of one theme."""

import numpy as np
import pytest

from core.errors import InvalidInput
from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.stages.themes import themes_group

# Three themes about "bicycle maintenance"; the tyre theme has many near-identical documents,
# so by score alone the tyre pages fill the context.
TYRES = [
    ReadDocument(
        external_id=f"tyres/{n}",
        title=f"Bicycle tyre puncture repair, part {n}",
        text=f"Bicycle maintenance: repair a tyre puncture. Patch the inner tube of the bicycle tyre, step {n}.",
    )
    for n in range(6)
]
CHAIN = ReadDocument(
    external_id="chain/oil",
    title="Bicycle chain care",
    text="Bicycle maintenance: clean and oil the chain every few hundred kilometres so gears shift smoothly.",
)
BRAKES = ReadDocument(
    external_id="brakes/pads",
    title="Bicycle brake pads",
    text="Bicycle maintenance: replace worn brake pads when the grooves disappear and adjust the brake cable.",
)


@pytest.fixture
def broad_corpus(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[*TYRES, CHAIN, BRAKES])
    return tenant


def cited_documents(run):
    return {c.passage.document.external_id for c in run.answer.citations}


def packed_documents(run):
    pack = next(step for step in run.steps if step.stage == "pack")
    return [entry["chunk_id"] for entry in pack.summary["passages"]]


def test_themes_pack_every_theme_of_a_broad_question_first(broad_corpus):
    question = "What does bicycle maintenance involve?"
    plain = pipeline_answer(AnswerRequest(question=question, use_llm=False, k=3), tenant=broad_corpus, trace=False)
    themed = pipeline_answer(
        AnswerRequest(question=question, use_llm=False, k=3),
        tenant=broad_corpus,
        trace=False,
        overrides={"themes": "on", "themes_threshold": 0.0},
    )
    plain_docs = {r.chunk.version.document.external_id for r in plain.retrieval.results}
    themed_docs = {r.chunk.version.document.external_id for r in themed.retrieval.results}
    assert {"chain/oil", "brakes/pads"} - plain_docs, "the scenario needs one theme to crowd the others out"
    assert {"chain/oil", "brakes/pads"} <= themed_docs
    step = next(step for step in themed.steps if step.stage == "themes")
    assert len(step.summary["themes"]) == 3
    assert any("tyre" in theme["label"] or "puncture" in theme["label"] for theme in step.summary["themes"])


def test_themes_change_nothing_when_no_more_candidates_pass_than_the_context_holds(broad_corpus):
    run = pipeline_answer(
        AnswerRequest(question="How do I oil a bicycle chain?", use_llm=False, k=3),
        tenant=broad_corpus,
        trace=False,
        overrides={"themes": "on", "themes_threshold": 0.99},
    )
    step = next(step for step in run.steps if step.stage == "themes")
    assert "skipped" in step.summary
    assert run.retrieval.results[0].chunk.version.document.external_id == "chain/oil"


def test_themes_are_off_by_default_and_validated(tenant):
    assert pipeline_spec(tenant=tenant).setting("themes") == "off"
    with pytest.raises(InvalidInput, match="themes"):
        pipeline_spec(tenant=tenant, overrides={"themes": "sometimes"})


def test_themes_group_keeps_best_first_order_and_caps_the_number_of_themes():
    vectors = np.array([[1, 0, 0], [0.99, 0.1, 0], [0, 1, 0], [0, 0, 1], [0.98, 0.05, 0]], dtype=np.float32)
    texts = ["tyre patch", "tyre tube", "chain oil", "brake pads", "tyre rim"]
    themes = themes_group(texts, vectors, max_themes=5, distance=0.3)
    assert [theme.members for theme in themes] == [[0, 1, 4], [2], [3]]
    assert "tyre" in themes[0].label
    assert len(themes_group(texts, vectors, max_themes=2, distance=0.3)) == 2
