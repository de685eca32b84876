from django.apps import AppConfig


class McpServerConfig(AppConfig):
    """The MCP server: no models; installed for its ``mcp`` management command."""

    name = "mcp_server"
    verbose_name = "MCP server"
