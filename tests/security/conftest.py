"""Fixtures of the security probes: the API's token clients and a temporary upload folder."""

from tests.api.conftest import (  # noqa: F401 - pytest fixtures, re-used as they are
    admin_client,
    editor_client,
    member_client,
    other_admin_client,
    upload_dir,
)


def pytest_terminal_summary(terminalreporter):
    """Print the probe table of the attack tests that ran (``tests/security/probe_table.py``)."""
    from tests.security.probe_table import probe_table

    table = probe_table()
    if table:
        terminalreporter.write_sep("-", "tenant-boundary probes")
        terminalreporter.write_line(table)
