"""Django's PostgreSQL backend plus the row-level-security hooks of ``core.rls``.

Every statement passes through ``core.rls.rls_execute`` (which applies the current scope's
transaction-local role and ``app.tenant_id``), and the wrapper forgets what it applied when the
transaction ends or a savepoint rolls back. Everything else is Django's backend unchanged.
"""

from __future__ import annotations

from django.db.backends.postgresql import base

from core import rls


class DatabaseWrapper(base.DatabaseWrapper):
    """``django.db.backends.postgresql``'s wrapper with ``core.rls`` scopes applied per transaction."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rls_applied = rls.SESSION_DEFAULTS
        self.execute_wrappers.append(rls.rls_execute)

    def get_new_connection(self, conn_params):
        rls.rls_transaction_ended(self)
        return super().get_new_connection(conn_params)

    def _commit(self):
        rls.rls_transaction_ended(self)
        return super()._commit()

    def _rollback(self):
        rls.rls_transaction_ended(self)
        return super()._rollback()

    def _savepoint_rollback(self, sid):
        try:
            return super()._savepoint_rollback(sid)
        finally:
            rls.rls_savepoint_rolled_back(self)

    def _close(self):
        rls.rls_transaction_ended(self)
        return super()._close()
