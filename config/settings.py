"""Django settings, read from the environment (every variable is listed in docs/deployment.md).

Every variable goes through a typed helper in ``config.env`` that raises
``ImproperlyConfigured`` with a clear message on a bad value.
"""

from __future__ import annotations

import ipaddress
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_json,
    env_limit,
    env_list,
    env_path,
    env_rate,
    env_str,
    env_url,
    local_secret_key,
)
from core.embedder_keys import EMBEDDER_FORMS, embedder_key_valid
from core.telemetry import telemetry_endpoints

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])

# Where the embedded database, uploads and downloaded demo documents live.
KB_DATA_DIR = env_path("KB_DATA_DIR", BASE_DIR / ".kb-data")
KB_DATA_DIR.mkdir(parents=True, exist_ok=True)
# Where the demo keeps Django's docs, which its folder sources read: outside the data directory,
# which can never be granted to a tenant's sources (docs/security.md).
KB_DEMO_DIR = Path(env_str("KB_DEMO_DIR") or BASE_DIR / ".kb-demo").expanduser().resolve()

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if env_bool("KB_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set.")
    # No built-in key: an installation without SECRET_KEY (the demo) gets a random one, made
    # once and kept in KB_DATA_DIR/secret-key (owner-only). Production sets SECRET_KEY.
    SECRET_KEY = local_secret_key(KB_DATA_DIR / "secret-key")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "django_htmx",  # htmx for the portal, shipped as a static file (no front-end build)
    "core",  # tenancy: tenants, memberships, membership tokens
    "knowledge",
    "retrieval",
    "quality",
    "people",
    "portal",
    "demo",
    "mcp_server",  # the MCP server: /mcp and manage.py mcp (docs/mcp.md)
    "sso",  # single sign-on with OpenID Connect (docs/sso.md)
]

MIDDLEWARE = [
    # First, so its request latency (kb_http_request_duration_seconds) includes every other one.
    "core.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The audit log's actor and client address come from the request (core.audit, docs/audit.md).
    "core.audit.AuditContextMiddleware",
    # Row-level security: each request's statements run as the non-superuser role kb_app, bound to
    # the tenant the view resolves (core.rls, docs/rls.md).
    "core.rls.RowLevelSecurityMiddleware",
    # After a member's write, their reads stay on the primary until replicas replay it (core.replicas).
    "core.replicas.ReplicaWriteMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",  # request.htmx: the portal answers htmx with fragments
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.csp.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# Two roles (docs/deployment.md#database-roles): the runtime login that the server, the workers and
# the commands connect as (DATABASE_URL: not a superuser, owns no table, may only read and add to the
# audit log), and the tables' owner, which only `manage.py migrate` connects as (DATABASE_OWNER_URL;
# core.db_roles.owner_connection). The embedded server has both: kb_runtime and postgres.
DATABASE_URL = env_url("DATABASE_URL", schemes=("postgres", "postgresql", "pgsql"))
DATABASE_OWNER_URL = env_url("DATABASE_OWNER_URL", schemes=("postgres", "postgresql", "pgsql"))
if DATABASE_URL:
    KB_DATABASE_RUNTIME = dj_database_url.parse(DATABASE_URL)
    # Without DATABASE_OWNER_URL the one login does both (manage.py check --deploy warns).
    KB_DATABASE_OWNER = dj_database_url.parse(DATABASE_OWNER_URL or DATABASE_URL)
    if KB_DATABASE_OWNER["NAME"] != KB_DATABASE_RUNTIME["NAME"]:
        raise ImproperlyConfigured(
            f"DATABASE_OWNER_URL names the database {KB_DATABASE_OWNER['NAME']!r} but DATABASE_URL names "
            f"{KB_DATABASE_RUNTIME['NAME']!r}: the owner's and the runtime role's URLs must name the same database."
        )
elif DATABASE_OWNER_URL:
    raise ImproperlyConfigured(
        "DATABASE_OWNER_URL is set but DATABASE_URL is not: set DATABASE_URL to the runtime role's URL too."
    )
else:
    from config.embedded_db import embedded_database_settings

    KB_DATABASE_RUNTIME, KB_DATABASE_OWNER = embedded_database_settings(KB_DATA_DIR)
# Which of the two "default" connects as: "runtime" (the server, workers, commands), or "owner": the
# test suite (pytest-django creates, migrates and empties its database through "default"; the default
# under pytest) and the benchmarks, which build databases and drop indexes. Never a server.
KB_DATABASE_ROLE = env_choice(
    "KB_DATABASE_ROLE", "owner" if "pytest" in sys.modules else "runtime", ["runtime", "owner"]
)
DATABASES = {"default": dict(KB_DATABASE_OWNER if KB_DATABASE_ROLE == "owner" else KB_DATABASE_RUNTIME)}
# Seconds a thread keeps its database connection for its next request or task (0: one connection
# per request). A server thread then skips the connection set-up (a PostgreSQL backend process and
# its authentication) on every request; Django checks a reused connection before its first query.
# Each gunicorn thread and each hybrid search's retriever thread holds one: keep workers x
# (threads + 2) + Celery workers below the server's max_connections.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("KB_DB_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Row-level security as defence in depth (core.rls, docs/rls.md): the backend core.postgresql runs
# requests' and tenant_context()'s statements as the role kb_app under each table's tenant policy.
# KB_RLS=false keeps the policies but runs everything as the session role (the runtime login, which
# bypasses them: no protection).
KB_RLS = env_bool("KB_RLS", True)
DATABASES["default"]["ENGINE"] = "core.postgresql"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Read replicas (core.replicas, docs/scale.md): PostgreSQL streaming replicas of the primary, one
# alias each (replica1, replica2...). Only search, ask and the portal's reading pages read from
# them; writes, migrations and ingestion use the primary. Under the test runner they mirror
# "default" (no test database is created for them).
DATABASE_REPLICA_URLS = env_list("DATABASE_REPLICA_URLS", [])
KB_REPLICA_ALIASES: list[str] = []
for _n, _url in enumerate(DATABASE_REPLICA_URLS, start=1):
    if _url.split("://", 1)[0] not in ("postgres", "postgresql", "pgsql"):
        raise ImproperlyConfigured(f"DATABASE_REPLICA_URLS: {_url!r} must be a postgresql:// URL.")
    _replica = dj_database_url.parse(_url)
    _replica.update(
        ENGINE="core.postgresql",
        CONN_MAX_AGE=DATABASES["default"]["CONN_MAX_AGE"],
        CONN_HEALTH_CHECKS=True,
        TEST={"MIRROR": "default"},
    )
    _replica.setdefault("OPTIONS", {}).setdefault("connect_timeout", 2)  # a dead host is skipped fast
    DATABASES[f"replica{_n}"] = _replica
    KB_REPLICA_ALIASES.append(f"replica{_n}")
DATABASE_ROUTERS = ["core.replicas.ReplicaRouter"]
# A replica further behind the primary than this many seconds is skipped until it catches up.
KB_REPLICA_MAX_LAG_S = env_float("KB_REPLICA_MAX_LAG_S", 5.0, minimum=0)
# Read-your-writes: after a member's write their reads wait for a replica to replay it, at most
# this many seconds (then the lag limit alone applies).
KB_REPLICA_RYW_S = env_int("KB_REPLICA_RYW_S", 30, minimum=1)
# How often a web process checks a replica's replay position (s), and how long one that failed to
# connect is skipped (s).
KB_REPLICA_CHECK_S = env_float("KB_REPLICA_CHECK_S", 1.0, minimum=0)
KB_REPLICA_RETRY_S = env_float("KB_REPLICA_RETRY_S", 5.0, minimum=0)
# Where writes' WAL positions are kept for read-your-writes: Redis when REDIS_URL is set (shared by
# every web process and worker), else this process's memory.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "replicas": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": env_str("REDIS_URL"), "KEY_PREFIX": "kb"}
        if env_str("REDIS_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "kb-replicas"}
    ),
    # Counters of refused single sign-ons per client address (sso.services): Redis when REDIS_URL is
    # set (every web process counts together), else this process's memory.
    "throttles": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": env_str("REDIS_URL"), "KEY_PREFIX": "kb"}
        if env_str("REDIS_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "kb-throttles"}
    ),
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL",
    env_str("REDIS_URL"),
    schemes=("redis", "rediss", "amqp", "memory"),
)
# With no broker configured, tasks run in-process (the demo needs no Redis). Celery's in-memory
# transport then stands in for the broker: an eager task still takes a producer from the broker's
# connection pool, which would otherwise be an AMQP connection to a default host ("No hostname was
# supplied"). Nothing is ever sent through it.
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
if CELERY_TASK_ALWAYS_EAGER:
    CELERY_BROKER_URL = "memory://localhost/"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("KB_TASK_TIME_LIMIT", 3600, minimum=10)
# A running ingestion job holds a lease of this many seconds, renewed every third of it while its
# worker lives; once it runs out (the worker died), a redelivered or retried task, or the recovery
# task (Celery beat, every lease), takes the job over.
KB_JOB_LEASE_S = env_int("KB_JOB_LEASE_S", 60, minimum=3)
# After an ingestion, the tables it grew are vacuumed and analyzed in the background once this
# many seconds have passed (ingestions within that window share one upkeep).
KB_MAINTAIN_DELAY_S = env_int("KB_MAINTAIN_DELAY_S", 30, minimum=0)
# A job started this many times without finishing (its worker keeps dying) is marked failed.
KB_JOB_MAX_ATTEMPTS = env_int("KB_JOB_MAX_ATTEMPTS", 5, minimum=1)
# Retries of a job after a temporary failure (database unreachable, embedding endpoint down),
# with exponential backoff capped at KB_JOB_RETRY_BACKOFF_MAX_S seconds.
KB_JOB_MAX_RETRIES = env_int("KB_JOB_MAX_RETRIES", 5, minimum=0)
KB_JOB_RETRY_BACKOFF_MAX_S = env_int("KB_JOB_RETRY_BACKOFF_MAX_S", 300, minimum=1)
# Redis redelivers an unacknowledged message after the visibility timeout: only once its task
# must have ended (hard time limit) and its job's lease run out, so a slow but live task is never
# run twice, and a killed worker's task comes back. Retry countdowns stay below it.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT + KB_JOB_LEASE_S}
if KB_JOB_RETRY_BACKOFF_MAX_S >= CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]:
    raise ImproperlyConfigured(
        f"KB_JOB_RETRY_BACKOFF_MAX_S={KB_JOB_RETRY_BACKOFF_MAX_S} must be below KB_TASK_TIME_LIMIT + KB_JOB_LEASE_S "
        "(the broker's visibility timeout), or Redis would deliver a delayed retry twice."
    )

# --- Models ---------------------------------------------------------------------------------
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_url("OPENAI_BASE_URL", schemes=("http", "https"))
# New tenants' embedder: "local" = all-MiniLM-L6-v2 on this machine; "mpnet" = all-mpnet-base-v2 on
# this machine (requirements-mpnet.txt); "openai:<model>" = an OpenAI-compatible endpoint.
KB_EMBEDDER = env_str("KB_EMBEDDER", "local")
if not embedder_key_valid(KB_EMBEDDER):
    raise ImproperlyConfigured(
        f"KB_EMBEDDER={KB_EMBEDDER!r} must be {EMBEDDER_FORMS} (e.g. openai:text-embedding-3-small)."
    )
# Chat model for answers; empty = extractive answers, no LLM.
KB_LLM_MODEL = env_str("KB_LLM_MODEL")
if KB_LLM_MODEL and not (OPENAI_BASE_URL or OPENAI_API_KEY):
    raise ImproperlyConfigured("KB_LLM_MODEL is set but neither OPENAI_BASE_URL nor OPENAI_API_KEY is.")
KB_LLM_TIMEOUT_S = env_int("KB_LLM_TIMEOUT_S", 120, minimum=1)
KB_LLM_RETRIES = env_int("KB_LLM_RETRIES", 2, minimum=0)  # extra attempts on 429, 5xx, timeouts
KB_LLM_CONCURRENCY = env_int("KB_LLM_CONCURRENCY", 4, minimum=1)  # LLM requests in flight per client
# The circuit breaker: this many consecutive failed requests stop calls for the cooldown (seconds).
KB_LLM_CIRCUIT_FAILURES = env_int("KB_LLM_CIRCUIT_FAILURES", 5, minimum=1)
KB_LLM_CIRCUIT_COOLDOWN_S = env_int("KB_LLM_CIRCUIT_COOLDOWN_S", 30, minimum=1)
# {model: [USD per million prompt tokens, USD per million completion tokens]}; other models cost 0.
KB_LLM_PRICES = env_json(
    "KB_LLM_PRICES",
    {"gpt-4o-mini": [0.15, 0.6], "gpt-4o": [2.5, 10.0], "gpt-4.1-mini": [0.4, 1.6], "gpt-4.1": [2.0, 8.0]},
)
if not isinstance(KB_LLM_PRICES, dict) or not all(
    isinstance(price, list)
    and len(price) == 2
    and all(isinstance(p, int | float) and not isinstance(p, bool) and p >= 0 for p in price)
    for price in KB_LLM_PRICES.values()
):
    raise ImproperlyConfigured(
        'KB_LLM_PRICES must be a JSON object {"model": [usd_per_million_in, usd_per_million_out]} '
        "with non-negative numbers."
    )
KB_EMBED_BATCH_SIZE = env_int("KB_EMBED_BATCH_SIZE", 64, minimum=1)
# How the local embedders ("local", all-MiniLM-L6-v2, and "mpnet") run: "onnx" (ONNX Runtime, fp32,
# exported once from the shipped weights into KB_DATA_DIR/models/), "torch" (sentence-transformers) or "onnx-int8"
# (dynamic int8 quantization). "onnx" gives torch's vectors (cosine > 0.9999) with much faster
# single queries; int8 lost 0.013 hybrid nDCG@10 on HotpotQA (benchmarks/embedders.py).
KB_EMBEDDER_BACKEND = env_choice("KB_EMBEDDER_BACKEND", "onnx", ["torch", "onnx", "onnx-int8"])
# Threads one call of the "local" embedder may use (ONNX Runtime's intra-op threads, or torch's),
# per process; 0 = the library's default (one per core). A server whose request threads embed side
# by side already fills the cores: 1 there avoids threads competing for them (docs/deployment.md).
KB_EMBED_THREADS = env_int("KB_EMBED_THREADS", 0, minimum=0)
# Query embeddings kept per embedder (LRU; repeated questions skip the model); 0 disables.
KB_QUERY_EMBED_CACHE = env_int("KB_QUERY_EMBED_CACHE", 1024, minimum=0)
# Vectors of ingested texts kept per embedder and process, by the SHA-256 of the text (LRU): a
# re-ingested unchanged chunk, a near-duplicate version's shared passages and a re-index skip the
# model. 20,000 MiniLM vectors take 31 MB; 0 disables it (benchmarks/embed_cache.py).
KB_EMBED_CACHE = env_int("KB_EMBED_CACHE", 20000, minimum=0)
# llama.cpp threads of the bundled local LLM server (manage.py localllm, scripts/demo.sh --llm).
# Its threads spin-wait for each other, so on cores that other work also uses (the demo syncing
# beside it, a Celery worker) 1 thread answers up to 10x sooner than 2 (llm/local.py).
KB_LOCAL_LLM_THREADS = env_int("KB_LOCAL_LLM_THREADS", 2, minimum=1)
# Where the local embedders run (knowledge.embedders.device): "cpu"; "cuda" (the GPU, at fp16; the
# torch backend only, and refused at first use when no GPU is visible); "auto" (the GPU when the
# torch backend is chosen and PyTorch sees one, else the CPU). KB_EMBED_BATCH_SIZE is the CPU's
# batch, KB_EMBED_BATCH_SIZE_CUDA the GPU's (a GPU only fills up on large batches).
KB_EMBED_DEVICE = env_choice("KB_EMBED_DEVICE", "cpu", ["cpu", "cuda", "auto"])
if KB_EMBED_DEVICE == "cuda" and KB_EMBEDDER_BACKEND != "torch":
    raise ImproperlyConfigured(
        f"KB_EMBED_DEVICE=cuda needs KB_EMBEDDER_BACKEND=torch (the {KB_EMBEDDER_BACKEND!r} backend runs an fp32 "
        "ONNX graph on the CPU); set KB_EMBEDDER_BACKEND=torch, or KB_EMBED_DEVICE=cpu or auto."
    )
KB_EMBED_BATCH_SIZE_CUDA = env_int("KB_EMBED_BATCH_SIZE_CUDA", 256, minimum=1)
# The Celery queue of the embedding task (knowledge.tasks.chunks_embed_task). Empty (the default):
# ingestion embeds inline, in the worker that parses, splits and writes, and a document is fully
# searchable when its job ends. A name (e.g. "embed"): ingestion stores chunks without embeddings
# and queues their embedding there, for GPU workers started with -Q <name> (docs/scale.md).
KB_EMBED_QUEUE = env_str("KB_EMBED_QUEUE")
# --- The tenant boundary (docs/security.md) ---------------------------------------------------
# Uploads: the largest file, and the largest multipart request (several files of the portal's
# form), refused while the body streams in (core.uploads). KB_MAX_UPLOAD_MB is the setting;
# KB_MAX_UPLOAD_BYTES is what the code reads.
KB_MAX_UPLOAD_MB = env_float("KB_MAX_UPLOAD_MB", 20, minimum=0.001)
KB_MAX_UPLOAD_BYTES = int(KB_MAX_UPLOAD_MB * 1024 * 1024)
KB_MAX_UPLOAD_REQUEST_MB = env_float("KB_MAX_UPLOAD_REQUEST_MB", max(KB_MAX_UPLOAD_MB, 100), minimum=0.001)
KB_MAX_UPLOAD_REQUEST_BYTES = int(KB_MAX_UPLOAD_REQUEST_MB * 1024 * 1024)
if KB_MAX_UPLOAD_REQUEST_BYTES < KB_MAX_UPLOAD_BYTES:
    raise ImproperlyConfigured("KB_MAX_UPLOAD_REQUEST_MB must be at least KB_MAX_UPLOAD_MB.")
# Parsing PDF and office files (knowledge.ingestion.sandbox): a child process with at most this
# much more memory and this much CPU time (and wall time), and caps on what a file may unpack to.
KB_PARSE_MEMORY_MB = env_int("KB_PARSE_MEMORY_MB", 1024, minimum=64)
KB_PARSE_TIMEOUT_S = env_int("KB_PARSE_TIMEOUT_S", 20, minimum=1)
KB_PARSE_MAX_UNPACKED_MB = env_int("KB_PARSE_MAX_UNPACKED_MB", 100, minimum=1)
KB_PARSE_MAX_RATIO = env_int("KB_PARSE_MAX_RATIO", 100, minimum=2)
KB_PARSE_MAX_CHARS = env_int("KB_PARSE_MAX_CHARS", 5_000_000, minimum=1000)
KB_PARSE_MAX_PDF_PAGES = env_int("KB_PARSE_MAX_PDF_PAGES", 2000, minimum=1)
# OCR of scanned pages and of images holding text (knowledge.ingestion.ocr): the engine (tesseract, Debian's
# binary, the default: as accurate as RapidOCR on scans for a fifth to a third of its CPU, docs/benchmarks.md;
# rapidocr, from its wheel, needs KB_PARSE_MEMORY_MB=2048; or off), the most pages of one document it reads
# (the rest are named as skipped), the resolution pages are rendered at, the parse time each OCR'd page adds
# to KB_PARSE_TIMEOUT_S, and the Celery queue of the ingestion jobs that need OCR (empty: the ordinary
# queue), so bigger workers can take them.
KB_OCR_ENGINE = env_choice("KB_OCR_ENGINE", "tesseract", ["rapidocr", "tesseract", "off"])
KB_OCR_MAX_PAGES = env_int("KB_OCR_MAX_PAGES", 50, minimum=0)
KB_OCR_DPI = env_int("KB_OCR_DPI", 200, minimum=72)
KB_OCR_PAGE_TIMEOUT_S = env_int("KB_OCR_PAGE_TIMEOUT_S", 10, minimum=1)
KB_OCR_QUEUE = env_str("KB_OCR_QUEUE", "")
# Outbound fetches for tenants (web and git sources, core.outbound) reach public (global unicast)
# addresses only; the operator opens intranet ranges here (CIDRs, e.g. 10.20.0.0/16). Empty: none.
KB_FETCH_ALLOWED_NETWORKS = env_list("KB_FETCH_ALLOWED_NETWORKS", [])
for _network in KB_FETCH_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as _error:
        raise ImproperlyConfigured(
            f"KB_FETCH_ALLOWED_NETWORKS: {_network!r} is not a network in CIDR form, e.g. 10.20.0.0/16 ({_error})."
        ) from None
# Operator limits on what tenant admins may ask of the connectors (checked on create, edit and use).
KB_WEB_MAX_PAGES = env_int("KB_WEB_MAX_PAGES", 5000, minimum=1)  # the largest page_limit
KB_WEB_MIN_CRAWL_DELAY_S = env_float("KB_WEB_MIN_CRAWL_DELAY_S", 0.5, minimum=0.0)  # the least crawl_delay_s
KB_WEB_MAX_PAGE_MB = env_float("KB_WEB_MAX_PAGE_MB", 10, minimum=0.01)  # the largest page or sitemap, decompressed
KB_MIN_SYNC_EVERY_S = env_int("KB_MIN_SYNC_EVERY_S", 900, minimum=60)  # the least sync_every (15 minutes)
KB_GIT_MAX_MB = env_int("KB_GIT_MAX_MB", 500, minimum=1)  # the most one git fetch may download, or unpack to
KB_GIT_TIMEOUT_S = env_int("KB_GIT_TIMEOUT_S", 600, minimum=5)  # the longest one git fetch may take
# Service connectors (Slack, Confluence, Google Drive, GitHub, Jira, Notion; knowledge.connectors.http):
# tries on 429/5xx and dropped connections (Retry-After honoured), the backoff's first pause, a request's timeout.
KB_CONNECTOR_RETRIES = env_int("KB_CONNECTOR_RETRIES", 5, minimum=0)
KB_CONNECTOR_BACKOFF_S = env_float("KB_CONNECTOR_BACKOFF_S", 0.5, minimum=0.0)
KB_CONNECTOR_TIMEOUT_S = env_int("KB_CONNECTOR_TIMEOUT_S", 30, minimum=1)
# A service source's permission sync (groups, each document's readers, deletions) runs this often
# unless the source sets its own perm_every; the least perm_every a tenant may set.
KB_PERM_SYNC_EVERY_S = env_int("KB_PERM_SYNC_EVERY_S", 900, minimum=60)
KB_MIN_PERM_SYNC_EVERY_S = env_int("KB_MIN_PERM_SYNC_EVERY_S", 300, minimum=60)
# Keys that encrypt stored secrets (connector tokens, SSO client secrets; core.secrets): Fernet keys,
# comma-separated, the first encrypts, all decrypt (rotation: put the new key first, then
# `manage.py rotatekeys`). Empty: a key derived from SECRET_KEY (check --deploy warns).
KB_SECRET_KEYS = env_list("KB_SECRET_KEYS", [])
# Per-tenant quotas' installation defaults (knowledge.quotas; an operator overrides them per tenant).
# Unset, empty or 'unlimited' = no limit. Syncs per day are limited by default: every sync costs the server a crawl.
KB_QUOTA_DOCUMENTS = env_limit("KB_QUOTA_DOCUMENTS")
KB_QUOTA_STORED_MB = env_limit("KB_QUOTA_STORED_MB")
KB_QUOTA_CHUNKS = env_limit("KB_QUOTA_CHUNKS")
KB_QUOTA_SOURCES = env_limit("KB_QUOTA_SOURCES")
KB_QUOTA_SYNCS_PER_DAY = env_limit("KB_QUOTA_SYNCS_PER_DAY", 500)
KB_QUOTA_LLM_TOKENS_PER_DAY = env_limit("KB_QUOTA_LLM_TOKENS_PER_DAY")
# Near-duplicate documents (knowledge.dedup, docs/dedup.md): searched after each ingestion (a
# Celery task), at this Jaccard similarity of 5-word shingles or more (a tenant may override it
# with retrieval_config["near_duplicate_threshold"]). 0.5 measured on two Django releases
# (benchmarks/near_duplicates.py): precision 1.0 at 0.5-0.9, and only 0.5 leaves no page twice.
KB_NEAR_DUPLICATES = env_bool("KB_NEAR_DUPLICATES", True)
KB_NEAR_DUPLICATE_THRESHOLD = env_float("KB_NEAR_DUPLICATE_THRESHOLD", 0.5, minimum=0.5)
if KB_NEAR_DUPLICATE_THRESHOLD > 1:
    raise ImproperlyConfigured(f"KB_NEAR_DUPLICATE_THRESHOLD={KB_NEAR_DUPLICATE_THRESHOLD} must be at most 1.")
# Enrichment of chunks (knowledge.enrichment, docs/enrichment.md): keyphrases (YAKE) and, with
# an LLM configured, KB_ENRICHMENT_QUESTIONS questions per chunk (0 = none), indexed as a separate
# BM25 field after each ingestion (a Celery task). A tenant may override the switch with
# retrieval_config["enrichment"]; retrieval_config["enrichment_weight"] weighs the field.
KB_ENRICHMENT = env_bool("KB_ENRICHMENT", False)
KB_ENRICHMENT_QUESTIONS = env_int("KB_ENRICHMENT_QUESTIONS", 3, minimum=0)
# Named entities (spaCy's en_core_web_sm) in the same field, when enrichment runs; per tenant
# retrieval_config["enrichment_entities"]. Off by measurement (benchmarks/enrichment_quality.py,
# docs/enrichment.md: a question or a document per set, for twice the keyphrases' cost).
KB_ENRICHMENT_ENTITIES = env_bool("KB_ENRICHMENT_ENTITIES", False)
# Per-document summaries (knowledge.summaries, docs/summaries.md): written after each ingestion (a
# Celery task) as one summary chunk per version; "auto" uses the LLM when one is configured, else
# the extractive summary. A tenant may override it with retrieval_config["summaries"].
KB_SUMMARIES = env_choice("KB_SUMMARIES", "off", ["off", "auto", "extractive", "llm"])
# Hybrid search runs the dense retriever's SQL on a worker thread's own connection while BM25
# runs (retrieval.stages.retrieve.candidates); false keeps every statement on the caller's.
KB_CONCURRENT_RETRIEVERS = env_bool("KB_CONCURRENT_RETRIEVERS", True)
KB_FUSION = env_choice("KB_FUSION", "weighted", ["rrf", "weighted", "tm2c2", "dbsf"])
# The answer pipeline a tenant uses unless its retrieval_config or the request names another.
KB_PIPELINE = env_choice(
    "KB_PIPELINE", "simple", ["simple", "rephrase", "expand", "hyde", "advanced", "superrag", "walkingrag", "adaptive"]
)
# The run's registry (retrieval.registry): code a run calls from apps above retrieval, named in
# order. The signal rerankers run in this order after fusion (retrieval.stages.rerank); the person
# hooks give the answer prompt its user layer and the recency reranker its source feedback; the
# memory retriever searches the facts walks kept. Wiring, not deployment settings: no variables.
KB_SIGNAL_RERANKERS = (
    "retrieval.stages.rerank.near_duplicates",
    "retrieval.stages.rerank.recency",
    "people.rerank",
    "retrieval.stages.rerank.diversity",
)
KB_PERSON_HOOKS = {
    "user_layer": "people.personalization.user_layer_compose",
    "source_feedback_counts": "people.feedback.source_feedback_counts",
}
KB_MEMORY_RETRIEVER = "retrieval.walks.memory.memory_search"
# The meter of every LLM call made for a tenant (llm.metering): its daily LLM tokens quota,
# checked before each call and recorded after it (knowledge.quotas.meter). Empty: no metering.
KB_LLM_METER = "knowledge.quotas.meter.llm_meter_for"
# Budget of one multi-round answer run (WalkingRAG): wall time in ms and LLM cost in USD; the walk
# stops starting rounds once either is spent, then answers from what it gathered.
KB_BUDGET_MS = env_int("KB_BUDGET_MS", 60000, minimum=1)
KB_BUDGET_USD = env_float("KB_BUDGET_USD", 0.05, minimum=0.0)
# A steered walk paused for a person (retrieval.walks.steering) answers by itself after this long.
KB_WALK_PAUSE_TIMEOUT_S = env_float("KB_WALK_PAUSE_TIMEOUT_S", 900.0, minimum=1.0)
# Record a trace of every answer run (retrieval.tracing); off only for measuring its cost.
KB_TRACING = env_bool("KB_TRACING", True)
# The MCP server (mcp_server, docs/mcp.md) answers each POST /mcp as an event stream (progress
# notifications while `ask` runs) instead of one JSON response.
KB_MCP_SSE = env_bool("KB_MCP_SSE", False)
KB_SCORE_ANSWERS = env_bool("KB_SCORE_ANSWERS", False)  # answer-quality scores on every answer (retrieval.stages.score)
KB_TRACE_RETENTION_DAYS = env_int("KB_TRACE_RETENTION_DAYS", 30, minimum=1)  # days answer traces are kept
DATA_UPLOAD_MAX_MEMORY_SIZE = KB_MAX_UPLOAD_BYTES + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# The upload limits above, enforced while the body streams in (core.uploads), before Django's own
# two handlers keep a file in memory or in a temporary file.
FILE_UPLOAD_HANDLERS = [
    "core.uploads.UploadLimitHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# --- Telemetry (core.telemetry, core.metrics, docs/telemetry.md) -------------------------------
# OpenTelemetry spans are exported when the standard OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP protobuf,
# e.g. http://127.0.0.1:4318) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; core.telemetry reads them
# (checked here, at start) and the SDK reads them and the other OTEL_* variables itself.
telemetry_endpoints()
env_choice("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", ["http/protobuf"])  # the exporter installed
# Spans carry the question and text derived from it (queries, replies, errors) only when true.
KB_OTEL_CAPTURE_QUESTIONS = env_bool("KB_OTEL_CAPTURE_QUESTIONS", False)
# /metrics answers a signed-in superuser, or "Authorization: Bearer <KB_METRICS_TOKEN>" when set.
KB_METRICS_TOKEN = env_str("KB_METRICS_TOKEN")
if KB_METRICS_TOKEN and len(KB_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("KB_METRICS_TOKEN must be at least 16 characters long.")

# --- Web ------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = KB_DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
LOGIN_URL = "portal:login"
# AxesStandaloneBackend first: it refuses a locked-out username+IP before any password check.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Keeps a single sign-on session's user; it authenticates no password (sso.backends).
    "sso.backends.OidcBackend",
]
# Single sign-on (docs/sso.md): the installation's OpenID Connect provider, the operator's own
# (its fetches may reach any address). Tenants' own providers are set by the operator with
# `manage.py sso` or the superuser admin. The issuer must be https:// (http:// only on loopback);
# set together with the client id and secret (sso.providers.installation_settings_check).
KB_OIDC_ISSUER = env_url("KB_OIDC_ISSUER", schemes=("https", "http"))
KB_OIDC_CLIENT_ID = env_str("KB_OIDC_CLIENT_ID")
KB_OIDC_CLIENT_SECRET = env_str("KB_OIDC_CLIENT_SECRET")
KB_OIDC_NAME = env_str("KB_OIDC_NAME", "single sign-on")  # the button reads "Sign in with <name>"
KB_OIDC_SCOPES = env_str("KB_OIDC_SCOPES", "openid email profile")
# Refused single sign-ons (any provider): after this many from one client address at one provider
# within the window (s), that address's sign-ins there are answered 429 until the window ends; a
# refusal is recorded in the audit log once per window per provider, address and reason.
KB_SSO_REFUSAL_LIMIT = env_int("KB_SSO_REFUSAL_LIMIT", 10, minimum=1)
KB_SSO_REFUSAL_WINDOW_S = env_int("KB_SSO_REFUSAL_WINDOW_S", 300, minimum=1)
# How long (s) a provider's discovery document or keys that could not be read are not fetched
# again (0: fetched at every sign-in until they are read).
KB_SSO_DISCOVERY_FAILURE_TTL_S = env_int("KB_SSO_DISCOVERY_FAILURE_TTL_S", 60, minimum=0)
LOGIN_REDIRECT_URL = "portal:ask"
LOGOUT_REDIRECT_URL = "portal:login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.authentication.MembershipTokenAuthentication",  # DRF tokens and membership tokens
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "core.api.BoundedLimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "core.api.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_rate("KB_API_RATE", "600/min"),
        "anon": env_rate("KB_API_ANON_RATE", "60/min"),
    },
}
SPECTACULAR_SETTINGS = {
    # Swagger UI from drf-spectacular-sidecar's static files: /api/docs/ works offline and under the CSP.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "TITLE": "Knowledge base API",
    "DESCRIPTION": "Ingest a team's documents; search them and ask questions with cited answers.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # One name per choice set that several components share (ingestion jobs and sync runs share
    # their statuses; a source's kind is in its input and output).
    "ENUM_NAME_OVERRIDES": {
        "SourceKindEnum": "knowledge.models.Source.Kind",
        "RunStatusEnum": "knowledge.models.SyncRun.Status",
        "KindEnum": ["body", "summary"],  # a search result's chunk kind
    },
    # The schema and its docs page need a signed-in user or a token unless KB_PUBLIC_API_DOCS.
    "SERVE_PERMISSIONS": [
        "rest_framework.permissions.AllowAny"
        if env_bool("KB_PUBLIC_API_DOCS", False)
        else "rest_framework.permissions.IsAuthenticated"
    ],
}

# --- Security --------------------------------------------------------------------------------
# Login throttling (django-axes) for the portal's and the admin's sign-in forms: after
# KB_LOGIN_FAILURE_LIMIT failed attempts by one username from one IP address, that pair is locked
# out for KB_LOGIN_COOLOFF_MINUTES (HTTP 429 and templates/portal/lockout.html); a successful
# sign-in clears the pair's failures. The client IP is REMOTE_ADDR.
AXES_FAILURE_LIMIT = env_int("KB_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("KB_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "portal/lockout.html"
AXES_USERNAME_CALLABLE = "portal.login.login_attempt_username"  # storable: no NUL, at most 255 chars

# Content-Security-Policy (django-csp): no inline script or style, nothing from other origins, no
# framing. The admin and the Swagger UI page carry small inline <style> blocks of their own, so
# portal.csp.ContentSecurityPolicyMiddleware adds 'unsafe-inline' to style-src there only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
KB_CSP_INLINE_STYLE_PREFIXES = ["/admin/", "/api/docs/"]
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
# KB_HTTPS=true when the site is served over HTTPS (directly or behind a proxy that sets
# X-Forwarded-Proto): HTTP redirects to HTTPS, HSTS for KB_HSTS_SECONDS (default one year),
# and the session and CSRF cookies are sent over HTTPS only.
KB_HTTPS = env_bool("KB_HTTPS", False)
if KB_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = env_int("KB_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("KB_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("KB_HSTS_PRELOAD", False)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if not SECURE_HSTS_PRELOAD:
        # Asking browsers to preload HSTS is a separate, hard-to-undo decision (KB_HSTS_PRELOAD).
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", "WARNING", ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]),
    },
}
