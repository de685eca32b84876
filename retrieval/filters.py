"""The retrieval filter, built once and shared by the lexical and dense retrievers.

A ``RetrievalFilter`` says which chunks a query may see: the tenant's, optionally only those of
some sources, only current versions (or those current on an ``as_of`` date), only chunks the
user's access rules allow, and never the files attached to conversations but those of the
conversation asking (``knowledge.attachments``). ``chunk_condition`` renders it as one composed SQL condition
(``psycopg.sql``) over a chunk table alias, with named parameters, so both retrievers apply the
very same rule inside their SQL, before ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from psycopg import sql

from knowledge.access import access_scope_get
from knowledge.attachments import attached_versions_hidden


@dataclass(frozen=True)
class RetrievalFilter:
    """Which chunks a query may see. ``tenant_id`` is required; ``source_ids`` empty = all sources."""

    tenant_id: int
    source_ids: tuple[int, ...] = field(default=())
    # Versions: None = current versions only; a date = the versions current that day.
    as_of: date | None = None
    # Access rules: who is asking (see ``_access_parts``); None = no user-level rules.
    access: Any = None
    # Summaries: False keeps summary chunks out (``Chunk.kind = 'summary'``).
    summaries: bool = True
    # Files attached to conversations (``knowledge.attachments``): the documents of the conversation
    # asking (searched even when ``source_ids`` names other sources), and the versions of every
    # other attached file, hidden (``knowledge.attachments.attached_versions_hidden``).
    conversation_documents: tuple[int, ...] = field(default=())
    hidden_versions: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def for_tenant(
        cls,
        tenant,
        *,
        source_ids=None,
        as_of: date | None = None,
        access=None,
        summaries: bool = True,
        conversation_documents=(),
        hidden_versions=(),
    ) -> RetrievalFilter:
        return cls(
            tenant_id=tenant.pk,
            source_ids=tuple(sorted(set(source_ids or ()))),
            as_of=as_of,
            access=access,
            summaries=summaries,
            conversation_documents=tuple(sorted(set(conversation_documents))),
            hidden_versions=tuple(sorted(set(hidden_versions))),
        )

    @property
    def narrows_tenant(self) -> bool:
        """True when the filter keeps fewer chunks than "every current chunk of the tenant".

        When false, ``posting_condition`` alone is the whole rule (BM25 needs no chunk lookup).
        """
        return (
            bool(self.source_ids)
            or self.as_of is not None
            or self._access_restricts
            or not self.summaries
            or bool(self.hidden_versions)
        )

    @property
    def _access_restricts(self) -> bool:
        return self.access is not None and self.access.restricts

    def versions_hidden(self) -> set[int]:
        """Ids of the versions this query may not see by who asks: those the access rules deny and the
        other conversations' attached files (for code that shows places outside the SQL, e.g. duplicates)."""
        denied = set(self.access.denied_versions) if self._access_restricts else set()
        return denied | set(self.hidden_versions)

    def params(self) -> dict:
        """The named parameters ``chunk_condition`` refers to."""
        params: dict = {"filter_tenant": self.tenant_id}
        if self.source_ids:
            params["filter_sources"] = list(self.source_ids)
        if self.as_of is not None:
            # Versions dated before the next day's midnight (UTC) count as "on or before as_of".
            params["filter_as_of_end"] = datetime.combine(self.as_of + timedelta(days=1), time(), tzinfo=UTC)
        if self._access_restricts:
            params.update(self.access.params())
        if self.hidden_versions:
            params["filter_hidden"] = list(self.hidden_versions)
        if self.conversation_documents and self.source_ids:
            params["filter_conversation_documents"] = list(self.conversation_documents)
        return params

    def chunk_condition(self, alias: str = "c") -> sql.Composed:
        """``<alias>.tenant_id = … AND …``: the condition a row of ``knowledge_chunk AS alias`` must meet."""
        chunk = sql.Identifier(alias)
        parts = [sql.SQL("{}.tenant_id = %(filter_tenant)s").format(chunk)]
        parts.extend(self._version_parts(chunk))
        parts.extend(self._access_parts(chunk))
        if self.hidden_versions:
            parts.append(sql.SQL("{}.version_id <> ALL(%(filter_hidden)s::bigint[])").format(chunk))
        if not self.summaries:
            parts.append(sql.SQL("{}.kind = 'body'").format(chunk))
        if self.source_ids:
            # The conversation's own files are searched whichever sources are named.
            attached = " OR fd.id = ANY(%(filter_conversation_documents)s)" if self.conversation_documents else ""
            parts.append(
                sql.SQL(
                    "{}.version_id IN (SELECT fv.id FROM knowledge_documentversion fv"
                    " JOIN knowledge_document fd ON fd.id = fv.document_id"
                    " WHERE fd.tenant_id = %(filter_tenant)s AND (fd.source_id = ANY(%(filter_sources)s)"
                    + attached
                    + "))"
                ).format(chunk)
            )
        return sql.SQL(" AND ").join(parts)

    def posting_condition(self, alias: str = "p") -> sql.Composed:
        """The condition a row of ``knowledge_posting AS alias`` (BM25) or of
        ``knowledge_enrichmentposting AS alias`` (the enrichment field; same ``chunk_id`` and
        ``is_current`` columns) must meet: its chunk meets ``chunk_condition``. Without
        narrowing, the posting's own ``is_current`` flag is the rule.

        When access rules (or other conversations' attached files) are the only narrowing, the
        cheaper equivalent: the chunk is not one of the denied documents' chunks (found through the
        chunk's version index, so the cost follows the hidden chunks, not every chunk of the
        tenant: ``benchmarks/access_latency.py``).
        Excluding summaries the same way: the chunk is not one of the tenant's current summary
        chunks (partial index ``chunk_summary_tenant_idx``; one per document).
        """
        posting = sql.Identifier(alias)
        if not self.narrows_tenant:  # every current chunk of the tenant: the postings' own flag
            return sql.SQL("{}.is_current").format(posting)
        if not self.source_ids and self.as_of is None:
            parts = [sql.SQL("{}.is_current").format(posting)]
            if self._access_restricts:
                parts.append(
                    sql.SQL("{}.chunk_id NOT IN (SELECT dc.id FROM knowledge_chunk dc WHERE {})").format(
                        posting, self.access.denied_condition(sql.Identifier("dc"))
                    )
                )
            if self.hidden_versions:
                parts.append(
                    sql.SQL(
                        "{}.chunk_id NOT IN (SELECT hc.id FROM knowledge_chunk hc"
                        " WHERE hc.version_id = ANY(%(filter_hidden)s::bigint[]))"
                    ).format(posting)
                )
            if not self.summaries:
                parts.append(
                    sql.SQL(
                        "{}.chunk_id NOT IN (SELECT sc.id FROM knowledge_chunk sc"
                        " WHERE sc.tenant_id = %(filter_tenant)s AND sc.kind = 'summary' AND sc.is_current)"
                    ).format(posting)
                )
            return sql.SQL(" AND ").join(parts)
        return sql.SQL("{}.chunk_id IN (SELECT c.id FROM knowledge_chunk c WHERE {})").format(
            posting, self.chunk_condition("c")
        )

    # ---- versions ------------------------------------------------------------

    def _version_parts(self, chunk: sql.Identifier) -> list[sql.Composable]:
        """Conditions that keep current versions (or those current on ``as_of``).

        Default: ``is_current`` on the chunk row (denormalized from its version), which the
        partial index ``chunk_current_tenant_emb_idx`` and the postings' own ``is_current``
        serve. ``as_of``: per document of the tenant, the version with the latest date
        (``published_at``, else ingestion time) before the end of that day, ties by number
        (``knowledge.versions``), unless its document was deleted at its source by then; a version
        whose chunks retention dropped has none to find.
        """
        if self.as_of is None:
            return [sql.SQL("{}.is_current").format(chunk)]
        return [
            sql.SQL(
                "{}.version_id IN (SELECT DISTINCT ON (av.document_id) av.id FROM knowledge_documentversion av"
                " JOIN knowledge_document ad ON ad.id = av.document_id"
                " WHERE ad.tenant_id = %(filter_tenant)s"
                " AND COALESCE(av.published_at, av.ingested_at) < %(filter_as_of_end)s"
                " AND (ad.deleted_at IS NULL OR ad.deleted_at >= %(filter_as_of_end)s)"
                " ORDER BY av.document_id, COALESCE(av.published_at, av.ingested_at) DESC, av.number DESC)"
            ).format(chunk)
        ]

    # ---- access rules ---------------------------------------------------------

    def _access_parts(self, chunk: sql.Identifier) -> list[sql.Composable]:
        """Conditions that keep the chunks ``access`` (a ``knowledge.access.AccessScope``) may see."""
        return self.access.chunk_parts(chunk) if self._access_restricts else []

    # -----------------------------------------------------------------------------------------

    def summary(self) -> dict:
        """A compact description for traces."""
        data: dict = {"tenant": self.tenant_id}
        if self.source_ids:
            data["sources"] = list(self.source_ids)
        if self.as_of is not None:
            data["as_of"] = self.as_of.isoformat()
        if self.access is not None:
            data["access"] = self.access.summary()
        if not self.summaries:
            data["summaries"] = False
        if self.conversation_documents:
            data["conversation_documents"] = list(self.conversation_documents)
        return data  # nothing about other conversations' files, not even how many there are


def retrieval_filter(
    *,
    tenant,
    user=None,
    source_ids=None,
    as_of: date | None = None,
    summaries: bool = True,
    conversation_documents: tuple[int, ...] = (),
) -> RetrievalFilter:
    """The shared retrieval filter for ``user`` asking in ``tenant`` (sources, as-of date, access
    rules; ``summaries`` false keeps summary chunks out). Files attached to conversations are
    hidden, but ``conversation_documents`` (the files of the conversation asking:
    ``people.attachments``), for everyone, operators included (``knowledge.attachments``).

    ``user`` ``None`` applies no access rules (operators, evaluations); a user who is not a member
    of ``tenant`` gets ``PermissionDenied`` (``knowledge.access.access_scope_get``).
    """
    access = access_scope_get(tenant=tenant, user=user)
    return RetrievalFilter.for_tenant(
        tenant,
        source_ids=source_ids,
        as_of=as_of,
        access=access,
        summaries=summaries,
        conversation_documents=conversation_documents,
        hidden_versions=attached_versions_hidden(tenant=tenant, keep=conversation_documents),
    )
