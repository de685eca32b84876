"""The knowledge base as a Model Context Protocol server (docs/mcp.md): Streamable HTTP at ``/mcp``
beside the REST API (``views``, ``bridge``) and stdio (``manage.py mcp``, ``stdio``), both serving
the tools and resources of ``server`` through the services the REST API uses."""
