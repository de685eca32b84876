"""The MCP endpoint's URL (included at ``/mcp`` by ``config.urls``)."""

from django.urls import path

from mcp_server.views import McpView

app_name = "mcp_server"
urlpatterns = [path("", McpView.as_view(), name="endpoint")]
