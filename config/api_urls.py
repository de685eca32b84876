"""REST API v1 (mounted at /api/v1/ by ``config.urls``); every view is scoped to the caller's tenant."""

from django.urls import include, path

from core.audit_apis import AuditEventListApi
from knowledge.apis import DocumentDetailApi, DocumentListApi, JobDetailApi
from knowledge.figure_apis import DocumentFigureApi
from knowledge.quotas.apis import UsageApi
from knowledge.source_apis import (
    SourceDetailApi,
    SourceListApi,
    SourceRunDetailApi,
    SourceRunListApi,
    SourceSyncApi,
    SourceTestApi,
)
from people.apis import CitationOpenApi, ConversationDetailApi, ConversationListApi, FeedbackApi, ProfileApi
from people.ask_apis import AskApi, AskStreamApi
from people.attachment_apis import ConversationFileDetailApi, ConversationFileListApi, ConversationFileNewApi
from retrieval.apis import SearchApi
from retrieval.trace_apis import TraceDetailApi
from retrieval.walks.apis import (
    FactListApi,
    WalkDetailApi,
    WalkListApi,
    WalkPauseApi,
    WalkResumeApi,
    WalkStopApi,
)

app_name = "api"

urlpatterns = [
    path("documents/", DocumentListApi.as_view(), name="document-list"),
    path("documents/<int:document_id>/", DocumentDetailApi.as_view(), name="document-detail"),
    path(
        "documents/<int:document_id>/versions/<int:number>/figures/<int:index>.png",
        DocumentFigureApi.as_view(),
        name="document-figure",
    ),
    path("jobs/<int:job_id>/", JobDetailApi.as_view(), name="job-detail"),
    path("sources/", SourceListApi.as_view(), name="source-list"),
    path("sources/<int:source_id>/", SourceDetailApi.as_view(), name="source-detail"),
    path("sources/<int:source_id>/sync/", SourceSyncApi.as_view(), name="source-sync"),
    path("sources/<int:source_id>/test/", SourceTestApi.as_view(), name="source-test"),
    path("sources/<int:source_id>/runs/", SourceRunListApi.as_view(), name="source-run-list"),
    path("sources/<int:source_id>/runs/<int:run_id>/", SourceRunDetailApi.as_view(), name="source-run-detail"),
    path("search/", SearchApi.as_view(), name="search"),
    path("ask/", AskApi.as_view(), name="ask"),
    path("ask/stream/", AskStreamApi.as_view(), name="ask-stream"),
    path("conversations/", ConversationListApi.as_view(), name="conversation-list"),
    path("conversations/<int:conversation_id>/", ConversationDetailApi.as_view(), name="conversation-detail"),
    path("conversations/files/", ConversationFileNewApi.as_view(), name="conversation-file-new"),
    path(
        "conversations/<int:conversation_id>/files/", ConversationFileListApi.as_view(), name="conversation-file-list"
    ),
    path(
        "conversations/<int:conversation_id>/files/<int:file_id>/",
        ConversationFileDetailApi.as_view(),
        name="conversation-file-detail",
    ),
    path("traces/<int:trace_id>/", TraceDetailApi.as_view(), name="trace-detail"),
    path("traces/<int:trace_id>/feedback/", FeedbackApi.as_view(), name="trace-feedback"),
    path("traces/<int:trace_id>/citations/<int:n>/open/", CitationOpenApi.as_view(), name="citation-open"),
    path("facts/", FactListApi.as_view(), name="fact-list"),
    path("walks/", WalkListApi.as_view(), name="walk-list"),
    path("walks/<int:walk_id>/", WalkDetailApi.as_view(), name="walk-detail"),
    path("walks/<int:walk_id>/pause/", WalkPauseApi.as_view(), name="walk-pause"),
    path("walks/<int:walk_id>/resume/", WalkResumeApi.as_view(), name="walk-resume"),
    path("walks/<int:walk_id>/stop/", WalkStopApi.as_view(), name="walk-stop"),
    path("profile/", ProfileApi.as_view(), name="profile"),
    path("usage/", UsageApi.as_view(), name="usage"),
    path("settings/retrieval/", include("quality.api_urls")),
    path("audit/", AuditEventListApi.as_view(), name="audit-list"),
]
