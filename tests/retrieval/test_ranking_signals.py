"""Signal rerankers: recency and quality, and diversity."""

from dataclasses import replace
from datetime import date, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.errors import InvalidInput
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Source
from knowledge.services import documents_ingest
from retrieval.filters import RetrievalFilter
from retrieval.pipeline import pipeline_retrieve, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.rerank import diversity, recency
from retrieval.state import RunState
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import SourceFactory

QUESTION = "What is the default primary key type?"
REFERENCE = ReadDocument(
    external_id="ref/models/fields",
    title="Model field reference",
    text=(
        "Model field reference\n\nAutomatic primary key fields. By default Django gives each model an "
        "auto-incrementing primary key of the type set by DEFAULT_AUTO_FIELD, which new projects set "
        "to BigAutoField, a 64-bit integer."
    ),
)
RELEASE = ReadDocument(
    external_id="releases/3.2",
    title="Django 3.2 release notes",
    text=(
        "Django 3.2 release notes\n\nCustomizing type of auto-created primary keys. The default primary "
        "key type: when defining a model, if no field has primary_key=True an implicit primary key is "
        "added. The type of this implicit primary key is now configurable: the default primary key type "
        "is AutoField, and DEFAULT_AUTO_FIELD sets the default primary key type."
    ),
)


@pytest.fixture(autouse=True)
def fresh_signal_cache():
    """Each test sees its sources' current half-lives (the per-process cache is cleared)."""
    recency._signals.clear()
    recency._feedback.clear()


def days_ago(days: float) -> datetime:
    return timezone.now() - timedelta(days=days)


@pytest.fixture
def dated_corpus(tenant):
    """An undated reference page and a release note about the same question, published 5 years
    ago, beside three unrelated pages (so min-max fusion has a floor below both)."""
    ref = SourceFactory(tenant=tenant, name="ref")
    releases = SourceFactory(tenant=tenant, name="releases", half_life_days=365.0)
    documents_ingest(tenant=tenant, source=ref, documents=[REFERENCE, PASTA, BIKE, TAXES])
    documents_ingest(tenant=tenant, source=releases, documents=[replace(RELEASE, published_at=days_ago(5 * 365))])
    return tenant


def run_for(tenant, *, as_of=None, **settings):
    spec = pipeline_spec(tenant=tenant, name="simple").with_settings(**settings)
    return RunState(
        AnswerRequest(question="ranking", k=10),
        tenant=tenant,
        spec=spec,
        where=RetrievalFilter.for_tenant(tenant, as_of=as_of),
    )


def documents(results):
    return [r.chunk.version.document.external_id for r in results]


# ---- recency: the scoring math -----------------------------------------------------------------


def test_the_recency_factor_halves_the_decaying_part_every_half_life_and_never_goes_below_the_floor():
    assert recency.recency_factor(age_days=0, half_life_days=365, floor=0.5) == 1.0
    assert recency.recency_factor(age_days=365, half_life_days=365, floor=0.5) == pytest.approx(0.75)
    assert recency.recency_factor(age_days=730, half_life_days=365, floor=0.2) == pytest.approx(0.2 + 0.8 * 0.25)
    assert recency.recency_factor(age_days=365 * 200, half_life_days=365, floor=0.3) == pytest.approx(0.3)


def test_undated_documents_sources_without_a_half_life_and_future_dates_get_the_neutral_factor():
    assert recency.recency_factor(age_days=None, half_life_days=365, floor=0.5) == 1.0
    assert recency.recency_factor(age_days=4000, half_life_days=None, floor=0.5) == 1.0
    assert recency.recency_factor(age_days=-30, half_life_days=365, floor=0.5) == 1.0


def test_reliability_scales_the_score_by_the_quality_weight():
    assert recency.quality_factor(reliability=0.6, weight=1.0) == pytest.approx(0.6)
    assert recency.quality_factor(reliability=0.25, weight=0.5) == pytest.approx(0.5)
    assert recency.quality_factor(reliability=0.25, weight=0.0) == 1.0


def test_each_result_is_rescored_from_its_versions_date_its_sources_half_life_and_reliability(dated_corpus):
    Source.objects.filter(tenant=dated_corpus, name="releases").update(reliability=0.8)
    plain = pipeline_retrieve(
        AnswerRequest(question=QUESTION, k=5), tenant=dated_corpus, overrides={"recency": "off"}
    ).results
    assert not any("recency" in r.components for r in plain)
    as_of = (timezone.now() - timedelta(days=365)).date()  # one year closer to the release
    run = run_for(dated_corpus, as_of=as_of, recency_floor=0.4)
    fused = {r.chunk.pk: r.score for r in plain}
    results, summary = recency.rerank(run, plain, k=5)
    by_doc = {r.chunk.version.document.external_id: r for r in results}
    release = by_doc["releases/3.2"].components["recency"]
    age = release["age_days"]
    assert age == pytest.approx(4 * 365, abs=1.5)
    expected = 0.4 + 0.6 * 0.5 ** (age / 365)
    assert release["factor"] == pytest.approx(expected, abs=1e-3)
    assert (release["half_life_days"], release["reliability"], release["basis"]) == (365.0, 0.8, "published")
    assert by_doc["releases/3.2"].score == pytest.approx(
        fused[by_doc["releases/3.2"].chunk.pk] * expected * 0.8, rel=1e-3
    )
    reference = by_doc["ref/models/fields"].components["recency"]
    assert (reference["factor"], reference["basis"], reference["date"]) == (1.0, "undated", None)
    assert by_doc["ref/models/fields"].score == fused[by_doc["ref/models/fields"].chunk.pk]
    assert summary["reference"] == as_of.isoformat()
    assert (summary["dated"], summary["damped"]) == (1, 1)


def test_the_ingestion_time_dates_an_undated_version_when_the_tenant_asks_for_it(dated_corpus):
    Source.objects.filter(tenant=dated_corpus, name="ref").update(half_life_days=30.0)
    results = chunk_search(AnswerRequest(question=QUESTION, k=5), tenant=dated_corpus).results
    run = run_for(dated_corpus, recency_undated="ingested")
    results, _ = recency.rerank(run, results, k=5)
    reference = next(r for r in results if documents([r]) == ["ref/models/fields"]).components["recency"]
    assert reference["basis"] == "ingested"
    assert reference["date"] == timezone.now().date().isoformat()
    assert reference["factor"] == pytest.approx(1.0, abs=1e-3)


# ---- recency: in the pipeline ------------------------------------------------------------------


def test_recency_puts_the_current_reference_ahead_of_an_old_release_note(dated_corpus):
    off = pipeline_retrieve(
        AnswerRequest(question=QUESTION, pipeline="simple"), tenant=dated_corpus, overrides={"recency": "off"}
    )
    on = pipeline_retrieve(AnswerRequest(question=QUESTION, pipeline="simple"), tenant=dated_corpus)
    assert documents(off.results)[:2] == ["releases/3.2", "ref/models/fields"]
    assert documents(on.results)[:2] == ["ref/models/fields", "releases/3.2"]
    assert "recency" in [step.stage for step in on.steps]
    release = on.results[1].components
    assert {"lexical", "dense"} <= set(release)  # the retrievers' components stay
    assert release["recency"]["factor"] == pytest.approx(0.5 + 0.5 * 0.5**5, abs=2e-3)
    assert on.results[1].as_dict()["components"]["recency"]["date"] is not None


def test_old_but_relevant_material_is_damped_never_erased(dated_corpus):
    run = pipeline_retrieve(
        AnswerRequest(question=QUESTION, pipeline="simple"), tenant=dated_corpus, overrides={"recency_floor": 0.0}
    )
    release = next(r for r in run.results if documents([r]) == ["releases/3.2"])
    assert release.components["recency"]["factor"] < 0.05


def test_a_candidate_below_the_threshold_is_dropped(dated_corpus):
    Source.objects.filter(tenant=dated_corpus, name="releases").update(reliability=0.1)
    run = pipeline_retrieve(
        AnswerRequest(question=QUESTION, pipeline="simple"), tenant=dated_corpus, overrides={"recency_threshold": 0.2}
    )
    assert documents(run.results)[0] == "ref/models/fields"
    assert "releases/3.2" not in documents(run.results)
    step = next(s for s in run.steps if s.stage == "recency")
    assert step.summary["dropped"] >= 1
    assert all(r.components["recency"]["composite"] >= 0.2 for r in run.results)


def test_an_undated_fully_reliable_corpus_ranks_exactly_as_without_the_stage(corpus):
    on = pipeline_retrieve(AnswerRequest(question="fix a flat tyre", pipeline="simple", k=3), tenant=corpus)
    off = pipeline_retrieve(
        AnswerRequest(question="fix a flat tyre", pipeline="simple", k=3), tenant=corpus, overrides={"recency": "off"}
    )
    assert [(r.chunk.pk, r.score) for r in on.results] == [(r.chunk.pk, r.score) for r in off.results]
    assert "recency" not in [step.stage for step in on.steps]


def test_a_tenant_default_half_life_dates_every_source_without_its_own(tenant):
    source = SourceFactory(tenant=tenant, name="news")
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[
            replace(REFERENCE, external_id="old", published_at=days_ago(3000)),
            replace(
                REFERENCE,
                external_id="new",
                text=REFERENCE.text + " Existing projects keep their setting.",
                published_at=days_ago(1),
            ),
            PASTA,
            BIKE,
        ],
    )
    tenant.retrieval_config = {"recency_half_life_days": 100.0}
    tenant.save(update_fields=["retrieval_config"])
    results = chunk_search(AnswerRequest(question=QUESTION, k=2), tenant=tenant).results
    assert documents(results)[0] == "new"
    assert [r.components["recency"]["half_life_days"] for r in results] == [100.0, 100.0]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"recency": "maybe"}, "recency"),
        ({"recency_floor": 1.5}, "recency_floor"),
        ({"diversity": "shuffle"}, "diversity"),
        ({"diversity_per_document": 1.5}, "diversity_per_document"),
        ({"mmr_lambda": -0.1}, "mmr_lambda"),
    ],
)
def test_a_bad_signal_setting_is_a_clear_error_naming_it(tenant, config, message):
    tenant.retrieval_config = config
    with pytest.raises(InvalidInput, match=message):
        pipeline_spec(tenant=tenant)


def test_the_source_admin_edits_reliability_and_half_life(client, tenant, admin_member):
    from django.contrib.auth.models import Permission

    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    source = SourceFactory(tenant=tenant, name="blog")
    page = client.get(reverse("admin:knowledge_source_change", args=[source.pk]))
    assert b'name="reliability"' in page.content
    assert b'name="half_life_days"' in page.content


# ---- diversity ----------------------------------------------------------------------------------

LONG = ReadDocument(
    external_id="guide/tyres",
    title="The tyre guide",
    text="\n\n".join(
        f"Tyre section {n}\n\nPatch a flat bicycle tyre puncture: lever the tyre off the rim, find the hole "
        f"in the inner tube, glue a rubber patch on it, refit and inflate. Step {n} of the tyre repair."
        + " More words about tyres and tubes."
        * 30
        for n in range(6)
    ),
)
SHORT = [
    ReadDocument(
        external_id=f"notes/tyre-{n}",
        title=f"Tyre note {n}",
        text=f"Tyre note {n}\n\nA flat bicycle tyre: patch the inner tube with glue. Note {n}.",
    )
    for n in range(3)
]


@pytest.fixture
def crowded(tenant):
    """One long document whose chunks all match, beside three short ones in another source."""
    guide = SourceFactory(tenant=tenant, name="guide")
    notes = SourceFactory(tenant=tenant, name="notes")
    documents_ingest(tenant=tenant, source=guide, documents=[LONG])
    documents_ingest(tenant=tenant, source=notes, documents=SHORT)
    return tenant


def test_caps_keep_at_most_m_chunks_of_a_document_in_the_top_k_and_defer_the_rest(crowded):
    query = "patch a flat bicycle tyre inner tube"
    off = pipeline_retrieve(AnswerRequest(question=query, pipeline="simple", k=6), tenant=crowded)
    capped = pipeline_retrieve(
        AnswerRequest(question=query, pipeline="simple", k=6),
        tenant=crowded,
        overrides={"diversity": "caps", "diversity_per_document": 1},
    )
    assert documents(off.results).count("guide/tyres") >= 2
    top4 = documents(capped.results)[:4]
    assert sorted(top4) == ["guide/tyres", "notes/tyre-0", "notes/tyre-1", "notes/tyre-2"]
    assert len(capped.results) == 6  # deferred, not dropped
    assert [r.components["diversity"]["deferred"] for r in capped.results[4:]] == [1, 1]
    step = next(s for s in capped.steps if s.stage == "diversity")
    assert (step.summary["before"]["documents"], step.summary["after"]["documents"]) == (
        len(set(documents(off.results))),
        4,
    )


def test_a_per_source_cap_lets_every_source_into_the_top(crowded):
    capped = pipeline_retrieve(
        AnswerRequest(question="tyre section step of the tyre repair", pipeline="simple", k=4),
        tenant=crowded,
        overrides={"diversity": "caps", "diversity_per_document": 0, "diversity_per_source": 2},
    )
    sources = [r.chunk.version.document.source.name for r in capped.results]
    assert sorted(sources) == ["guide", "guide", "notes", "notes"]


def test_mmr_with_a_low_lambda_prefers_a_different_chunk_to_a_near_copy_of_the_first(crowded):
    query = "patch a flat bicycle tyre inner tube"
    relevance = pipeline_retrieve(AnswerRequest(question=query, pipeline="simple", k=8), tenant=crowded)
    mmr = pipeline_retrieve(
        AnswerRequest(question=query, pipeline="simple", k=8),
        tenant=crowded,
        overrides={"diversity": "mmr", "mmr_lambda": 0.3},
    )
    # The three short notes say nearly the same thing and rank first; MMR keeps the best one and
    # then takes a guide chunk rather than a near-copy of it.
    assert documents(relevance.results)[:3] == ["notes/tyre-2", "notes/tyre-1", "notes/tyre-0"]
    assert mmr.results[0].chunk.pk == relevance.results[0].chunk.pk
    second = mmr.results[1].components["diversity"]
    assert documents(mmr.results)[1] == "guide/tyres"
    assert (second["method"], second["lambda"]) == ("mmr", 0.3)
    assert second["max_similarity"] < 0.8
    copy = next(r for r in mmr.results if r.chunk.pk == relevance.results[1].chunk.pk)
    assert copy.components["diversity"]["max_similarity"] > 0.9
    assert copy.rank > 2


def test_mmr_with_lambda_one_is_the_relevance_order(crowded):
    query = "patch a flat bicycle tyre inner tube"
    relevance = pipeline_retrieve(AnswerRequest(question=query, pipeline="simple", k=8), tenant=crowded)
    mmr = pipeline_retrieve(
        AnswerRequest(question=query, pipeline="simple", k=8),
        tenant=crowded,
        overrides={"diversity": "mmr", "mmr_lambda": 1.0},
    )
    assert [r.chunk.pk for r in mmr.results] == [r.chunk.pk for r in relevance.results]


def test_diversity_is_off_by_default_and_caps_compute_on_real_results(crowded):
    run = run_for(crowded)
    assert not diversity.active(run)
    results = chunk_search(AnswerRequest(question="patch a flat bicycle tyre", k=8), tenant=crowded).results
    capped, deferred = diversity.results_cap(results, per_document=2, per_source=0)
    counts: dict = {}
    for r in capped[: len(capped) - deferred]:
        counts[r.chunk.version.document_id] = counts.get(r.chunk.version.document_id, 0) + 1
    assert max(counts.values()) <= 2
    assert deferred == len(results) - sum(counts.values())


def test_the_signal_stages_use_the_run_as_of_date_as_the_reference(dated_corpus):
    run = run_for(dated_corpus, as_of=date(2020, 1, 1))
    assert recency.reference_time(run).date() == date(2020, 1, 1)


# ---- recency: source feedback (off by default) ---------------------------------------------------


def test_the_feedback_factor_damps_only_sources_rated_worse_than_the_tenant_and_within_the_weight():
    factor, share = recency.feedback_factor(up=0, down=6, tenant_share=0.5, weight=1.0)
    assert share == pytest.approx((6 + 5 * 0.5) / 11) and factor == pytest.approx(1 - (share - 0.5))
    assert recency.feedback_factor(up=6, down=0, tenant_share=0.5, weight=1.0)[0] == 1.0
    assert recency.feedback_factor(up=0, down=1000, tenant_share=0.0, weight=0.3)[0] == pytest.approx(0.7, abs=0.01)
    assert recency.feedback_factor(up=0, down=6, tenant_share=0.5, weight=0.0)[0] == 1.0
    # Two thumbs down are not a verdict: the tenant's share pulls a sparse source back.
    assert recency.feedback_factor(up=0, down=2, tenant_share=0.5, weight=1.0)[0] > 0.85


def test_negative_citation_feedback_damps_its_source_when_the_tenant_turns_it_on(tenant):
    from people.models import Feedback
    from retrieval.models import Trace

    wiki, forum = SourceFactory(tenant=tenant, name="wiki"), SourceFactory(tenant=tenant, name="forum")
    documents_ingest(tenant=tenant, source=wiki, documents=[BIKE, PASTA])
    documents_ingest(
        tenant=tenant,
        source=forum,
        documents=[
            replace(
                BIKE,
                external_id="forum/puncture",
                text="Puncture repair: find the hole in the inner tube, patch it with glue and a rubber patch.",
            )
        ],
    )
    trace = Trace.objects.create(tenant=tenant, pipeline="simple", question="How do I fix a puncture?")
    for n, (source, rating) in enumerate([(forum, -1)] * 6 + [(wiki, 1)] * 6, 1):
        Feedback.objects.create(tenant=tenant, trace=trace, citation=n, source=source, rating=rating)
    question = "patch the puncture in the inner tube"
    default = pipeline_retrieve(AnswerRequest(question=question, k=5), tenant=tenant).results
    assert all(r.components.get("recency", {}).get("feedback", 1.0) == 1.0 for r in default)

    run = pipeline_retrieve(
        AnswerRequest(question=question, k=5), tenant=tenant, overrides={"source_feedback_weight": 1.0}
    )
    by_source = {r.chunk.version.document.source.name: r for r in run.results}
    damped, trusted = by_source["forum"].components["recency"], by_source["wiki"].components["recency"]
    assert damped["feedback_votes"] == [0, 6] and trusted["feedback_votes"] == [6, 0]
    assert damped["feedback"] == pytest.approx(1 - ((6 + 2.5) / 11 - 0.5), abs=1e-3)
    assert trusted["feedback"] == 1.0
    assert by_source["forum"].score == pytest.approx(damped["relevance"] * damped["feedback"], rel=1e-3)
    assert [r.score for r in run.results] == sorted((r.score for r in run.results), reverse=True)
    with pytest.raises(InvalidInput, match="source_feedback_weight"):
        pipeline_spec(tenant=tenant, overrides={"source_feedback_weight": 2})
