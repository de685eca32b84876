"""The database's two roles (``core.db_roles``, docs/deployment.md#database-roles): the application
connects as the runtime role, which PostgreSQL refuses every attack on the append-only audit log;
the tables' owner, which only ``manage.py migrate`` connects as, is not refused (the guard off).

Each attack runs through the application's runtime connection, in one transaction that is rolled
back: in this process inside ``rls_bypass()`` (the Django connection with the runtime role's
login, as tasks, commands and the marked bypasses have it), and through ``manage.py shell -c``
with ``DATABASE_URL`` naming the runtime role. The same runs as the owner get through. The test
suite itself connects as the owner (``KB_DATABASE_ROLE``), so these tests use the runtime role's
login explicitly (``settings.KB_DATABASE_RUNTIME``: the embedded server's ``kb_runtime``).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import DatabaseError, connection

from core.audit import audit_record
from core.db_roles import database_role, database_roles_check, login_connection
from core.models import AuditEvent
from core.rls import rls_bypass
from knowledge.vector_index import tenant_vector_index_ensure, tenant_vector_index_exists, tenant_vector_indexes_prune
from tests.security.probe_table import probe_record

# Other connections (the runtime role's, a subprocess's) must see the event, and TRUNCATE must get
# its lock: no test transaction around these tests.
pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

ATTACKS = {
    "TRUNCATE": ["TRUNCATE core_auditevent"],
    "DISABLE TRIGGER + DELETE": [
        "ALTER TABLE core_auditevent DISABLE TRIGGER core_auditevent_append_only",
        "DELETE FROM core_auditevent",
    ],
    "session_replication_role + DELETE": [
        "SET session_replication_role = replica",
        "DELETE FROM core_auditevent",
    ],
}
REFUSED_WITH = {
    "TRUNCATE": "permission denied for table core_auditevent",
    "DISABLE TRIGGER + DELETE": "must be owner of table core_auditevent",
    "session_replication_role + DELETE": 'permission denied to set parameter "session_replication_role"',
}


def attack_outcome(connection, statements):
    """Run ``statements`` in one transaction of ``connection`` inside ``rls_bypass()``, then roll it
    back: ``"refused: <PostgreSQL's message>"``, or ``"through: N events left"`` (counted inside)."""
    connection.set_autocommit(False)
    try:
        with rls_bypass(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '20s'")
            for statement in statements:
                cursor.execute(statement)
            cursor.execute("SELECT count(*) FROM core_auditevent")
            return f"through: {cursor.fetchone()[0]} events left"
    except DatabaseError as exc:
        return "refused: " + str(exc).splitlines()[0]
    finally:
        connection.rollback()
        connection.set_autocommit(True)


def database_url(login: dict) -> str:
    """A ``DATABASE_URL`` for the test database with ``login``'s user, password, host and port."""
    port = f":{login['PORT']}" if login.get("PORT") else ""
    host = quote(login["HOST"] or "", safe="")
    return f"postgresql://{login['USER']}:{quote(login.get('PASSWORD') or '')}@{host}{port}/{connection.settings_dict['NAME']}"


def runtime_login() -> dict:
    return settings.KB_DATABASE_RUNTIME


def owner_login() -> dict:
    return connection.settings_dict  # the test suite connects as the owner


def manage_py(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``manage.py *args`` in a process of its own, with ``env`` over this one's environment (less
    the database settings, which ``env`` gives)."""
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_OWNER_URL", "KB_DATABASE_ROLE")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def event(tenant):
    return audit_record(action="source.created", tenant=tenant, object_type="source", object_id="7")


def trigger_enabled() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgenabled FROM pg_trigger WHERE tgname = 'core_auditevent_append_only'")
        return cursor.fetchone()[0] == "O"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_attack_on_the_audit_log_is_refused_to_the_runtime_role_inside_rls_bypass_and_gets_through_as_owner(
    event, attack
):
    with login_connection(runtime_login()) as runtime:
        assert database_role(runtime).name == runtime_login()["USER"]
        refused = attack_outcome(runtime, ATTACKS[attack])
    through = attack_outcome(connection, ATTACKS[attack])  # the guard off: the owner

    probe_record(attack=f"audit log: {attack}", guard="on", outcome=refused.split(":")[0], detail=refused)
    probe_record(attack=f"audit log: {attack}", guard="off", outcome=through.split(":")[0], detail=through)
    assert refused == f"refused: {REFUSED_WITH[attack]}"
    assert through == "through: 0 events left"
    # Both rolled back: the event is still there, the trigger still on.
    assert AuditEvent.objects.filter(pk=event.pk).exists() and trigger_enabled()


def test_the_attacks_through_manage_py_shell_are_refused_as_the_runtime_role_and_get_through_as_the_owner(event):
    code = (
        "import json\nfrom django.db import DatabaseError, connection\nfrom core.rls import rls_bypass\n"
        + textwrap.dedent(inspect.getsource(attack_outcome))
        + f"\nATTACKS = {ATTACKS!r}\n"
        + "print(json.dumps({name: attack_outcome(connection, s) for name, s in ATTACKS.items()}))\n"
    )
    outcomes = {}
    for role, login in (("runtime", runtime_login()), ("owner", owner_login())):
        done = manage_py("shell", "-c", code, env={"DATABASE_URL": database_url(login)})
        assert done.returncode == 0, done.stderr
        outcomes[role] = json.loads(done.stdout.strip().splitlines()[-1])

    assert outcomes["runtime"] == {attack: f"refused: {message}" for attack, message in REFUSED_WITH.items()}
    assert outcomes["owner"] == {attack: "through: 0 events left" for attack in ATTACKS}
    assert AuditEvent.objects.filter(pk=event.pk).exists() and trigger_enabled()


def test_migrate_connects_as_the_owner_and_every_other_command_as_the_runtime_role():
    code = textwrap.dedent(
        """
        import json
        from django.core.management import call_command
        from django.db import connection
        from django.db.models.signals import post_migrate

        def login():
            with connection.cursor() as cursor:
                cursor.execute("SELECT session_user")
                return cursor.fetchone()[0]

        during = []
        post_migrate.connect(lambda **kwargs: during.append(login()), weak=False)
        before = login()
        call_command("migrate", verbosity=0)
        print(json.dumps([before, sorted(set(during)), login()]))
        """
    )
    env = {"DATABASE_URL": database_url(runtime_login()), "DATABASE_OWNER_URL": database_url(owner_login())}
    done = manage_py("shell", "-c", code, env=env)

    assert done.returncode == 0, done.stderr
    runtime, owner = runtime_login()["USER"], owner_login()["USER"]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [runtime, [owner], runtime]


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="the embedded server's roles")
def test_the_embedded_server_has_a_runtime_role_that_is_no_superuser_owns_nothing_and_bypasses_rls():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.DATABASES['default']['USER'], s.KB_DATABASE_OWNER['USER'])",
        ],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_OWNER_URL", "KB_DATABASE_ROLE")},
            "DJANGO_SETTINGS_MODULE": "config.settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["kb_runtime", "postgres"]

    with login_connection(runtime_login()) as runtime:
        role = database_role(runtime)
    assert (role.name, role.superuser, role.bypassrls, role.app_member) == ("kb_runtime", False, True, True)
    assert role.owned == () and not role.audit_writable
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolcreatedb, rolcreaterole, rolcanlogin FROM pg_roles WHERE rolname = 'kb_runtime'")
        assert cursor.fetchone() == (False, False, True)


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        (
            {"DATABASE_OWNER_URL": "postgresql://owner@db.example/kb"},
            "DATABASE_OWNER_URL is set but DATABASE_URL is not",
        ),
        (
            {
                "DATABASE_URL": "postgresql://app@db.example/kb",
                "DATABASE_OWNER_URL": "postgresql://owner@db.example/other",
            },
            "must name the same database",
        ),
    ],
)
def test_the_server_refuses_to_start_with_an_owner_url_alone_or_for_another_database(env, refusal):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_OWNER_URL")}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "ImproperlyConfigured" in done.stderr and refusal in done.stderr


def test_check_deploy_warns_when_the_app_connects_as_a_superuser_that_owns_the_tables_and_not_as_the_runtime_role():
    warned = {message.id for message in database_roles_check()}
    with login_connection(runtime_login()):
        quiet = database_roles_check(databases=["default"])

    assert warned == {"core.W001", "core.W002"}
    assert quiet == []
    done = manage_py("check", "--deploy", "--tag", "security", env={"DATABASE_URL": database_url(owner_login())})
    assert done.returncode == 0 and "core.W001" in done.stderr and "core.W002" in done.stderr


def test_the_runtime_role_builds_and_drops_a_tenants_hnsw_index_only_through_the_owners_functions(corpus):
    with login_connection(runtime_login()) as runtime, rls_bypass():
        with pytest.raises(DatabaseError, match="must be owner of table knowledge_chunk"):
            with runtime.cursor() as cursor:
                cursor.execute("CREATE INDEX chunk_emb_local_t1_hnsw ON knowledge_chunk (id)")
        with pytest.raises(DatabaseError, match="is not the HNSW index name"):
            with runtime.cursor() as cursor:
                cursor.execute(
                    "SELECT kb_vector_index_create(%s, 'local', 384)", ["chunk_emb_local_hnsw ON x; DROP TABLE y --"]
                )

        name = tenant_vector_index_ensure(tenant_id=corpus.pk, embedder_key=corpus.embedder, min_chunks=1)
        built = tenant_vector_index_exists(tenant_id=corpus.pk, embedder_key=corpus.embedder)
        dropped = tenant_vector_indexes_prune(tenant_id=corpus.pk)
        gone = not tenant_vector_index_exists(tenant_id=corpus.pk, embedder_key=corpus.embedder)

    assert built and dropped == [name] and gone
