"""factory_boy factories for the product's main models.

Models are named as ``"app_label.ModelName"`` strings (resolved when a factory first runs).
Objects that belong to a tenant take it from their parent, so one argument places them: a
``DocumentFactory(source=source)`` is in ``source.tenant``, a ``ChunkFactory(version=version)`` in
the version's document's tenant, a ``FeedbackFactory(trace=trace)`` in the trace's.

The factories write rows only, without the product's services: a ``ChunkFactory`` chunk has a
fixed unit embedding and no BM25 postings (``knowledge.services.documents_ingest`` makes
searchable chunks), a ``DocumentVersionFactory`` version is current unless told otherwise (a
document has one current version).
"""

import hashlib

import factory
from django.contrib.auth import get_user_model
from django.db.models import Max

# The local embedder's dimensions (all-MiniLM-L6-v2): the per-embedder vector index casts to it.
LOCAL_DIMENSIONS = 384


def _next_number(manager, field: str, first: int = 1) -> int:
    """One more than the largest ``field`` under a saved parent's related ``manager``, else ``first``."""
    top = manager.aggregate(top=Max(field))["top"] if manager.instance.pk is not None else None
    return first if top is None else top + 1


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "core.Tenant"

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())
    embedder = "local"


class UserFactory(factory.django.DjangoModelFactory):
    """A user whose password is ``pass-word-123``."""

    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pass-word-123")

    @factory.post_generation
    def saved(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class MembershipFactory(factory.django.DjangoModelFactory):
    """A user's membership of a tenant, as a member unless ``role`` says otherwise."""

    class Meta:
        model = "core.Membership"

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = "member"


class SourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "knowledge.Source"

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"source-{n}")


class DocumentFactory(factory.django.DjangoModelFactory):
    """A document (no version yet) in its source's tenant."""

    class Meta:
        model = "knowledge.Document"

    source = factory.SubFactory(SourceFactory)
    tenant = factory.SelfAttribute("source.tenant")
    external_id = factory.Sequence(lambda n: f"docs/page-{n}")
    title = factory.Sequence(lambda n: f"Page {n}")


class DocumentVersionFactory(factory.django.DjangoModelFactory):
    """The document's next version (number one more than its last), current by default."""

    class Meta:
        model = "knowledge.DocumentVersion"

    document = factory.SubFactory(DocumentFactory)
    tenant = factory.SelfAttribute("document.tenant")
    number = factory.LazyAttribute(lambda o: _next_number(o.document.versions, "number"))
    text = factory.Sequence(lambda n: f"Page {n}\n\nThe text of page {n}.")
    content_hash = factory.LazyAttribute(lambda o: hashlib.sha256(o.text.encode("utf-8")).hexdigest())
    is_current = True


class ChunkFactory(factory.django.DjangoModelFactory):
    """The version's next body chunk: its whole text by default, a fixed unit embedding, no postings."""

    class Meta:
        model = "knowledge.Chunk"

    version = factory.SubFactory(DocumentVersionFactory)
    tenant = factory.SelfAttribute("version.document.tenant")
    ordinal = factory.LazyAttribute(lambda o: _next_number(o.version.chunks, "ordinal", first=0))
    heading = factory.SelfAttribute("version.document.title")
    text = factory.SelfAttribute("version.text")
    token_count = factory.LazyAttribute(lambda o: len(o.text.split()))
    char_start = 0
    char_end = factory.LazyAttribute(lambda o: o.char_start + len(o.text))
    embedder = factory.SelfAttribute("tenant.embedder")
    embedding = factory.LazyFunction(lambda: [1.0] + [0.0] * (LOCAL_DIMENSIONS - 1))
    is_current = factory.SelfAttribute("version.is_current")


class IngestionJobFactory(factory.django.DjangoModelFactory):
    """A pending job for a file that was never stored (``stored_path`` does not exist)."""

    class Meta:
        model = "knowledge.IngestionJob"

    source = factory.SubFactory(SourceFactory)
    tenant = factory.SelfAttribute("source.tenant")
    file_name = factory.Sequence(lambda n: f"upload-{n}.md")
    stored_path = factory.LazyAttribute(lambda o: f"/nonexistent/{o.file_name}")


class AccessGroupFactory(factory.django.DjangoModelFactory):
    """A group of a tenant; ``members=[user, ...]`` adds members."""

    class Meta:
        model = "knowledge.AccessGroup"
        skip_postgeneration_save = True

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"group-{n}")

    @factory.post_generation
    def members(obj, create, extracted, **kwargs):
        if create and extracted:
            obj.members.add(*extracted)


class AccessRuleFactory(factory.django.DjangoModelFactory):
    """A grant of ``source`` (a new one unless ``document`` is given) to ``group`` (a new group
    of the tenant unless ``user`` is given); the tenant is the target's."""

    class Meta:
        model = "knowledge.AccessRule"

    document = None
    source = factory.Maybe("document", yes_declaration=None, no_declaration=factory.SubFactory(SourceFactory))
    tenant = factory.LazyAttribute(lambda o: (o.source or o.document).tenant)
    user = None
    group = factory.Maybe(
        "user",
        yes_declaration=None,
        no_declaration=factory.SubFactory(AccessGroupFactory, tenant=factory.SelfAttribute("..tenant")),
    )


class ProfileFactory(factory.django.DjangoModelFactory):
    """A member's profile; ``preferred_sources=[...]``, ``muted_sources=[...]`` set those."""

    class Meta:
        model = "people.Profile"
        skip_postgeneration_save = True

    membership = factory.SubFactory(MembershipFactory)

    @factory.post_generation
    def preferred_sources(obj, create, extracted, **kwargs):
        if create and extracted:
            obj.preferred_sources.set(extracted)

    @factory.post_generation
    def muted_sources(obj, create, extracted, **kwargs):
        if create and extracted:
            obj.muted_sources.set(extracted)


class JudgmentListFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "quality.JudgmentList"

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"judgments-{n}")
    origin = "manual"


class JudgmentFactory(factory.django.DjangoModelFactory):
    """A judged question; ``relevant`` lists ``{"document": external_id, "grade": int}``."""

    class Meta:
        model = "quality.Judgment"

    judgment_list = factory.SubFactory(JudgmentListFactory)
    query_id = factory.Sequence(lambda n: f"q{n}")
    question = factory.Sequence(lambda n: f"Question {n}?")
    relevant = factory.LazyFunction(list)


class EvaluationRunFactory(factory.django.DjangoModelFactory):
    """A stored evaluation run: ``ndcg`` is its mean nDCG@10, ``query_ndcg`` its queries as
    ``[(query_id, nDCG@10)]`` (each row's question is ``"Question <id>?"``); ``metrics__<name>=``
    adds another mean metric (``metrics__p50_ms=12.5``)."""

    class Meta:
        model = "quality.EvaluationRun"

    class Params:
        ndcg = 0.5
        query_ndcg = (("q1", 0.5),)

    tenant = factory.SubFactory(TenantFactory)
    dataset = "tiny"
    pipeline = "simple"
    mode = "hybrid"
    config = factory.LazyFunction(dict)
    metrics = factory.Dict(
        {
            "ndcg@10": factory.SelfAttribute("..ndcg"),
            "queries": factory.LazyAttribute(lambda d: len(d.factory_parent.query_ndcg)),
        }
    )
    per_query = factory.LazyAttribute(
        lambda o: [
            {"query_id": q, "question": f"Question {q}?", "metrics": {"ndcg@10": v}, "top": []} for q, v in o.query_ndcg
        ]
    )


class ConfigChangeFactory(factory.django.DjangoModelFactory):
    """A proposed retrieval-configuration change of a tenant, pending unless ``status`` says otherwise."""

    class Meta:
        model = "quality.ConfigChange"

    tenant = factory.SubFactory(TenantFactory)
    proposed_config = factory.LazyFunction(lambda: {"ef_search": 200})


class TraceFactory(factory.django.DjangoModelFactory):
    """A trace of an answer run (no steps), by ``user`` when one is given."""

    class Meta:
        model = "retrieval.Trace"

    tenant = factory.SubFactory(TenantFactory)
    user = None
    pipeline = "simple"
    question = factory.Sequence(lambda n: f"Question {n}?")
    answer = "An answer [1]."


class ConversationFactory(factory.django.DjangoModelFactory):
    """A user's conversation in a tenant (no turns yet); the user is a new member of the tenant
    unless given."""

    class Meta:
        model = "people.Conversation"

    tenant = factory.SubFactory(TenantFactory)
    user = factory.LazyAttribute(lambda o: MembershipFactory(tenant=o.tenant).user)
    title = factory.Sequence(lambda n: f"Conversation {n}")


class TurnFactory(factory.django.DjangoModelFactory):
    """The conversation's next turn (order one more than its last)."""

    class Meta:
        model = "people.Turn"

    conversation = factory.SubFactory(ConversationFactory)
    order = factory.LazyAttribute(lambda o: _next_number(o.conversation.turns, "order"))
    question = factory.Sequence(lambda n: f"Question {n}?")
    answer = "An answer [1]."
    pipeline = "simple"


class FeedbackFactory(factory.django.DjangoModelFactory):
    """A thumbs-up (``rating=-1`` for down) on a trace's answer (``citation=n`` for its [n]), by
    the trace's user."""

    class Meta:
        model = "people.Feedback"

    trace = factory.SubFactory(TraceFactory, user=factory.SubFactory(UserFactory))
    tenant = factory.SelfAttribute("trace.tenant")
    user = factory.SelfAttribute("trace.user")
    rating = 1


def folder_granted(tenant, path):
    """Grant ``tenant`` the folder ``path`` (a ``Path``, created if missing) as the operator would
    (``manage.py folderroots --add``); returns ``path``. A folder source may only read a granted folder."""
    from knowledge.folder_grants import folder_grant_add

    path.mkdir(parents=True, exist_ok=True)
    folder_grant_add(tenant=tenant, path=path, granted_by="tests")
    return path
