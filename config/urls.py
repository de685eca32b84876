"""Root URLconf: admin, REST API v1 with its OpenAPI schema, and the portal."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from core.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file (no inline script: see the CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("config.api_urls")),
    # Prometheus scrapes: the operator only (a superuser, or the KB_METRICS_TOKEN bearer token).
    path("metrics", metrics_view, name="metrics"),
    # The MCP server (Streamable HTTP, membership tokens; docs/mcp.md).
    path("mcp", include("mcp_server.urls")),
    path("sso/", include("sso.urls")),  # single sign-on with OpenID Connect (docs/sso.md)
    path("", include("portal.urls")),
]
