"""Fixtures of the security probes: the API's token clients, a temporary upload folder, and the
single sign-on tests' real OpenID Connect provider on loopback with tenant ``acme`` using it."""

from tests.api.conftest import (  # noqa: F401 - pytest fixtures, re-used as they are
    admin_client,
    editor_client,
    member_client,
    other_admin_client,
    upload_dir,
)
from tests.sso.conftest import (  # noqa: F401 - pytest fixtures, re-used as they are
    acme,
    acme_sso,
    idp,
)
