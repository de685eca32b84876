import math
from dataclasses import replace

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.ingestion.splitters import SingleChunkSplitter
from knowledge.models import Chunk, CorpusStatistic, Document, Posting, TermStatistic
from knowledge.services import document_delete, documents_ingest
from retrieval.filters import RetrievalFilter
from retrieval.stages.retrieve.lexical import bm25_search


def lexical_candidates(*, tenant, query, limit, **kwargs):
    return bm25_search(where=RetrievalFilter.for_tenant(tenant), query=query, limit=limit, **kwargs)


ALPHA = ReadDocument(external_id="alpha", title="Alpha", text="Cats chase mice.")
BETA = ReadDocument(external_id="beta", title="Beta", text="Cats, cats sleep.")
GAMMA = ReadDocument(external_id="gamma", title="Gamma", text="Dogs bark loudly.")


@pytest.fixture
def animals(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[ALPHA, BETA, GAMMA], splitter=SingleChunkSplitter())
    return tenant


def statistics(tenant):
    corpus = CorpusStatistic.objects.get(tenant=tenant)
    terms = dict(TermStatistic.objects.for_tenant(tenant).values_list("lexeme", "df"))
    return corpus.chunk_count, corpus.term_count, terms


def test_bm25_scores_match_a_hand_computed_example(animals):
    # Each chunk has 4 lexemes (title + 3 words): N = 3, avgdl = 4. "cat" is in 2 chunks:
    # idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln 1.6.
    # alpha: tf 1 -> 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 4/4)) = 1.0
    # beta:  tf 2 -> 2 * 2.2 / (2 + 1.2) = 1.375
    scores = dict(lexical_candidates(tenant=animals, query="cats", limit=10, k1=1.2, b=0.75))
    ids = dict(Chunk.objects.values_list("version__document__external_id", "id"))
    assert scores.keys() == {ids["alpha"], ids["beta"]}
    assert scores[ids["alpha"]] == pytest.approx(math.log(1.6) * 1.0)
    assert scores[ids["beta"]] == pytest.approx(math.log(1.6) * 1.375)


def test_bm25_sums_over_query_terms_and_ignores_stop_words(animals):
    scores = lexical_candidates(tenant=animals, query="the dogs and the mice", limit=10)
    ids = dict(Chunk.objects.values_list("version__document__external_id", "id"))
    idf_1 = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))  # "dog" and "mice" are each in one chunk
    assert dict(scores) == pytest.approx({ids["alpha"]: idf_1, ids["gamma"]: idf_1})


def test_term_statistics_count_each_chunk_once_per_lexeme(animals):
    chunk_count, term_count, terms = statistics(animals)
    assert (chunk_count, term_count) == (3, 12)
    assert terms["cat"] == 2 and terms["dog"] == 1 and terms["alpha"] == 1
    beta = Chunk.objects.get(version__document__external_id="beta")
    assert dict(Posting.objects.filter(chunk=beta).values_list("lexeme", "tf")) == {"beta": 1, "cat": 2, "sleep": 1}
    assert Posting.objects.for_tenant(animals).count() == sum(terms.values())


def test_term_statistics_follow_a_new_version(animals, source):
    documents_ingest(
        tenant=animals,
        source=source,
        splitter=SingleChunkSplitter(),
        documents=[replace(GAMMA, text="Dogs bark at cats.")],
    )
    chunk_count, term_count, terms = statistics(animals)
    assert chunk_count == 3 and term_count == 12
    assert terms["cat"] == 3
    assert "loud" not in terms


def test_term_statistics_follow_deletion(animals, other_tenant_corpus):
    other_before = statistics(other_tenant_corpus)
    for document in Document.objects.for_tenant(animals):
        document_delete(tenant=animals, document_id=document.pk)
    chunk_count, term_count, terms = statistics(animals)
    assert (chunk_count, term_count, terms) == (0, 0, {})
    assert not Posting.objects.for_tenant(animals).exists()
    assert statistics(other_tenant_corpus) == other_before


def test_bm25_statistics_are_per_tenant(animals, other_tenant_corpus):
    assert "cat" not in statistics(other_tenant_corpus)[2]
    assert lexical_candidates(tenant=other_tenant_corpus, query="cats", limit=10) == []
