"""What the service connectors' end-to-end tests ask of the product: members, and what a member
finds (documents listed, search hits) after a sync."""

from __future__ import annotations

from knowledge.selectors import document_list
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.factories import MembershipFactory, UserFactory


def member(tenant, email: str, role: str = "member"):
    """A user with ``email`` who is a member of ``tenant`` with ``role``."""
    user = UserFactory(email=email)
    MembershipFactory(tenant=tenant, user=user, role=role)
    return user


def visible_titles(tenant, user) -> set[str]:
    """The titles of the tenant's current documents ``user`` may see (``document_list``)."""
    return {d.title for d in document_list(tenant=tenant, user=user)}


def search_titles(tenant, user, query: str, k: int = 20) -> set[str]:
    """The titles of the documents of the top ``k`` lexical search hits for ``query`` as ``user``."""
    results = chunk_search(AnswerRequest(question=query, k=k, mode="lexical"), tenant=tenant, user=user).results
    return {r.chunk.version.document.title for r in results}
