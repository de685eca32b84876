"""Portal URLs: sign in and out, ask a question (or stream its answer), read a cited document (or see
the cited page of its original PDF, or a cited figure's picture), see the sources, upload files
into them and (admins) test a service source's connection."""

from django.contrib.auth import views as auth_views
from django.urls import path

from portal import attachments, figures, service_sources, viewer, views, walks

app_name = "portal"
urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="portal/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.ask, name="ask"),
    path("tenant/", views.tenant_switch, name="tenant-switch"),
    path("ask/stream/", views.ask_stream, name="ask-stream"),
    path("feedback/", views.feedback, name="feedback"),
    path("answers/<int:trace_id>/citations/<int:n>/", views.citation_open, name="citation-open"),
    path("conversations/", views.conversations, name="conversations"),
    path("conversations/<int:conversation_id>/", views.conversation_detail, name="conversation"),
    path("conversations/<int:conversation_id>/delete/", views.conversation_remove, name="conversation-delete"),
    # Files of one's own in a conversation (portal.attachments).
    path("conversations/files/", attachments.conversation_file_start, name="conversation-file-start"),
    path(
        "conversations/<int:conversation_id>/files/",
        attachments.conversation_file_add,
        name="conversation-file-add",
    ),
    path(
        "conversations/<int:conversation_id>/files/<int:file_id>/delete/",
        attachments.conversation_file_delete,
        name="conversation-file-delete",
    ),
    path("profile/", views.profile, name="profile"),
    path("sources/", views.sources, name="sources"),
    path("sources/jobs/", views.upload_jobs, name="upload-jobs"),
    path("sources/table/", views.sources_table, name="sources-table"),
    path("sources/<int:source_id>/test/", service_sources.connection_test, name="source-test"),
    path("documents/<int:document_id>/", views.document_detail, name="document"),
    path("documents/<int:document_id>/view/", viewer.document_view, name="document-view"),
    path(
        "documents/<int:document_id>/versions/<int:number>/original.pdf",
        viewer.document_original,
        name="document-original",
    ),
    path(
        "documents/<int:document_id>/versions/<int:number>/figures/<int:index>.png",
        figures.figure_image,
        name="document-figure",
    ),
    path("walks/", walks.walks, name="walks"),
    path("walks/<int:walk_id>/", walks.walk_detail, name="walk"),
    path("walks/<int:walk_id>/state/", walks.walk_fragment, name="walk-state"),
    path("walks/<int:walk_id>/steer/", walks.walk_steer, name="walk-steer"),
]
