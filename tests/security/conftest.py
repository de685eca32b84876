"""Fixtures of the security probes: the API's token clients and a temporary upload folder."""

from tests.api.conftest import (  # noqa: F401 - pytest fixtures, re-used as they are
    admin_client,
    editor_client,
    member_client,
    other_admin_client,
    upload_dir,
)
