"""OpenID Connect providers and the fetches this server makes to them.

Two kinds of provider:

- **the installation's**, from the environment (``KB_OIDC_ISSUER``, ``KB_OIDC_CLIENT_ID``,
  ``KB_OIDC_CLIENT_SECRET``, ``KB_OIDC_NAME``, ``KB_OIDC_SCOPES``): the operator's own identity
  provider. Its fetches go out like any the operator configures (the environment's proxies, any
  address: it may well be on the intranet);
- **a tenant's own** (``sso.TenantSso`` with an issuer), set by the operator only. Its issuer is
  the operator's, but the discovery document that the provider serves names the token, JWKS and
  userinfo URLs, and whoever runs that provider (often the tenant) writes it. So every fetch for a
  tenant's provider, discovery included, connects through ``core.outbound``: public addresses
  only, or the ranges the operator opened (``KB_FETCH_ALLOWED_NETWORKS``), each redirect hop
  checked, no proxies from the environment, at most ``FETCH_MAX_BYTES`` read by the fetches of
  one step.

For both kinds, every answer is read whole as it arrives and decompressed in small steps, never
past ``FETCH_MAX_DECODED_BYTES`` once decompressed (``sso.fetches``: the sessions, their adapters
and ``body_read``).

The browser, not this server, follows the authorization endpoint. Discovery documents (with the
provider's JWKS) are kept per process for ``METADATA_TTL_S``, and a failure to read them for
``KB_SSO_DISCOVERY_FAILURE_TTL_S`` (so anonymous requests that start a sign-in cannot make this
server fetch again and again); a token signed with a key the kept JWKS lacks makes Authlib fetch
the JWKS again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.errors import ApplicationError
from core.models import Tenant
from core.rls import tenant_context
from core.secrets import secret_readable
from sso.fetches import ProviderUnavailable, session_class

DISCOVERY_PATH = "/.well-known/openid-configuration"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
METADATA_TTL_S = 600
# ID tokens are verified with the provider's public keys (JWKS) only: never HS256 with the client
# secret, never "none".
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
# What is kept of a discovery document (and handed to Authlib).
_METADATA_KEYS = (
    "issuer",
    "authorization_endpoint",
    "token_endpoint",
    "userinfo_endpoint",
    "jwks_uri",
    "id_token_signing_alg_values_supported",
    "token_endpoint_auth_methods_supported",
    "code_challenge_methods_supported",
)


# ---- configuration ----------------------------------------------------------------------------


def issuer_normalize(issuer: str) -> str:
    """``issuer`` stripped, without a trailing slash or a pasted discovery path."""
    issuer = (issuer or "").strip()
    if issuer.endswith(DISCOVERY_PATH):
        issuer = issuer[: -len(DISCOVERY_PATH)]
    return issuer.rstrip("/")


def issuer_problem(issuer: str) -> str | None:
    """Why ``issuer`` (normalized) cannot be a provider's issuer, or ``None``: it must be an
    ``https://`` URL (``http://`` only to a loopback host, a provider on this machine) with a
    host, and no credentials, query or fragment."""
    try:
        parts = urlsplit(issuer)
        host = parts.hostname
    except ValueError:
        return f"{issuer!r} is not a URL."
    if parts.scheme not in ("https", "http") or not host:
        return f"{issuer!r} must be an https:// URL, e.g. https://login.example.com/realms/acme."
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        return f"{issuer!r} must use https:// (http:// only for a provider on this machine)."
    if parts.username or parts.password or parts.query or parts.fragment:
        return f"{issuer!r} must not hold credentials, a query or a fragment."
    return None


def scopes_problem(scopes: str) -> str | None:
    """Why ``scopes`` (space-separated) will not do, or ``None``: they must include ``openid``."""
    if "openid" not in scopes.split():
        return f"The scopes {scopes!r} must include openid."
    return None


@dataclass(frozen=True)
class Provider:
    """One provider as sign-in uses it. ``tenant`` is ``None`` for the installation's; ``guarded``:
    its fetches go through ``core.outbound``; ``allow_other_tenants_members``: the operator lets
    this tenant's provider sign in accounts that are members of other tenants too
    (``TenantSso.allow_other_tenants_members``)."""

    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)  # left out of the repr (log lines, tracebacks)
    scopes: str
    tenant: Tenant | None = None
    guarded: bool = True
    allow_other_tenants_members: bool = False

    @property
    def key(self) -> str:
        """A short name, unique among providers: ``installation`` or ``tenant-<slug>``."""
        return "installation" if self.tenant is None else f"tenant-{self.tenant.slug}"

    @property
    def discovery_url(self) -> str:
        return self.issuer + DISCOVERY_PATH

    def audit_details(self) -> dict:
        """What the audit log keeps of the provider: ``{"provider": name, "issuer": url}``."""
        return {"provider": self.name, "issuer": self.issuer}


def _shown_name(name: str, issuer: str) -> str:
    return name.strip() or urlsplit(issuer).hostname or "single sign-on"


def installation_provider() -> Provider | None:
    """The installation's provider from ``KB_OIDC_*``, or ``None`` when ``KB_OIDC_ISSUER`` is unset."""
    issuer = issuer_normalize(settings.KB_OIDC_ISSUER)
    if not issuer:
        return None
    return Provider(
        name=_shown_name(settings.KB_OIDC_NAME, issuer),
        issuer=issuer,
        client_id=settings.KB_OIDC_CLIENT_ID,
        client_secret=settings.KB_OIDC_CLIENT_SECRET,
        scopes=settings.KB_OIDC_SCOPES,
        guarded=False,
    )


def installation_settings_check() -> None:
    """``ImproperlyConfigured`` naming the variable when ``KB_OIDC_*`` is half set or unusable: an
    issuer without a client id or secret (or the reverse), a bad issuer URL, scopes without openid."""
    issuer = issuer_normalize(settings.KB_OIDC_ISSUER)
    client_id = settings.KB_OIDC_CLIENT_ID
    secret = settings.KB_OIDC_CLIENT_SECRET
    if not issuer:
        if client_id or secret:
            raise ImproperlyConfigured("KB_OIDC_CLIENT_ID or KB_OIDC_CLIENT_SECRET is set but KB_OIDC_ISSUER is not.")
        return
    problem = issuer_problem(issuer)
    if problem:
        raise ImproperlyConfigured(f"KB_OIDC_ISSUER: {problem}")
    if not client_id or not secret:
        raise ImproperlyConfigured("KB_OIDC_ISSUER is set: KB_OIDC_CLIENT_ID and KB_OIDC_CLIENT_SECRET must be too.")
    problem = scopes_problem(settings.KB_OIDC_SCOPES)
    if problem:
        raise ImproperlyConfigured(f"KB_OIDC_SCOPES: {problem}")


def tenant_sso_get(*, tenant: Tenant):
    """The tenant's ``sso.TenantSso`` row, or ``None`` (read in the tenant's own scope, so it works
    before anyone is signed in)."""
    from sso.models import TenantSso

    with tenant_context(tenant):
        return TenantSso.objects.for_tenant(tenant).select_related("tenant").first()


def tenant_provider(*, slug: str) -> Provider | None:
    """The enabled provider of the tenant ``slug``'s own, or ``None`` (no such tenant, no single
    sign-on, switched off, or the tenant uses the installation's provider)."""
    tenant = Tenant.objects.filter(slug=slug).first() if slug else None
    row = tenant_sso_get(tenant=tenant) if tenant is not None else None
    if row is None or not row.enabled or row.uses_installation_provider:
        return None
    return Provider(
        name=_shown_name(row.name, row.issuer),
        issuer=issuer_normalize(row.issuer),
        client_id=row.client_id,
        client_secret=row.client_secret,
        scopes=row.scopes,
        tenant=tenant,
        guarded=True,
        allow_other_tenants_members=row.allow_other_tenants_members,
    )


_metadata: dict[tuple[str, bool], tuple[float, dict]] = {}
_failures: dict[tuple[str, bool], tuple[float, str]] = {}
_metadata_lock = threading.Lock()


def metadata_forget() -> None:
    """Drop every kept discovery document and kept failure (tests, a provider that changed its keys)."""
    with _metadata_lock:
        _metadata.clear()
        _failures.clear()


def _get_json(session, url: str, what: str) -> dict:
    response = session.request("GET", url, withhold_token=True)
    response.raise_for_status()
    data = response.json()
    if not isinstance(data, dict):
        raise ProviderUnavailable(f"The provider's {what} is not a JSON object.")
    return data


def metadata_get(provider: Provider) -> dict:
    """The provider's discovery document (the keys Authlib needs) with its JWKS under ``jwks``,
    fetched or kept for ``METADATA_TTL_S``.

    ``ProviderUnavailable`` when it cannot be fetched, is larger than ``FETCH_MAX_DECODED_BYTES``
    once decompressed, its ``issuer`` is not exactly the configured one (so a provider cannot pass
    itself off as another's issuer), or it lacks an endpoint; ``core.outbound.AddressNotAllowed``
    when a guarded fetch would reach a refused address. A failure is kept for
    ``KB_SSO_DISCOVERY_FAILURE_TTL_S`` seconds: meanwhile the same ``ProviderUnavailable``
    (its message) is raised again without fetching.
    """
    key = (provider.discovery_url, provider.guarded)
    now = time.monotonic()
    with _metadata_lock:
        kept = _metadata.get(key)
        failed = _failures.get(key)
    if kept is not None and now - kept[0] < METADATA_TTL_S:
        return dict(kept[1])
    if failed is not None and now - failed[0] < settings.KB_SSO_DISCOVERY_FAILURE_TTL_S:
        raise ProviderUnavailable(failed[1])
    try:
        metadata = _metadata_fetch(provider)
    except ApplicationError as exc:
        with _metadata_lock:
            _failures[key] = (time.monotonic(), exc.message)
        raise
    with _metadata_lock:
        _metadata[key] = (time.monotonic(), metadata)
        _failures.pop(key, None)
    return dict(metadata)


def _metadata_fetch(provider: Provider) -> dict:
    """The discovery document and JWKS, fetched now (``metadata_get``; same errors)."""
    import requests

    try:
        with session_class(guarded=provider.guarded)() as session:
            document = _get_json(session, provider.discovery_url, "discovery document")
            if issuer_normalize(str(document.get("issuer", ""))) != provider.issuer:
                raise ProviderUnavailable(
                    f"The provider's discovery document names the issuer {document.get('issuer')!r}, "
                    f"not {provider.issuer!r}."
                )
            missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)]
            if missing:
                raise ProviderUnavailable(f"The provider's discovery document lacks {', '.join(missing)}.")
            metadata = {k: document[k] for k in _METADATA_KEYS if k in document}
            metadata["jwks"] = _get_json(session, str(document["jwks_uri"]), "JWKS")
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"Could not read {provider.name}'s configuration: {type(exc).__name__}.") from exc
    algorithms = [
        a for a in metadata.get("id_token_signing_alg_values_supported") or ["RS256"] if a in SIGNING_ALGORITHMS
    ]
    metadata["id_token_signing_alg_values_supported"] = algorithms or ["RS256"]
    return metadata


def oauth_client(provider: Provider):
    """An Authlib ``DjangoOAuth2App`` for ``provider``: authorization code flow with PKCE (S256), a
    nonce, and ID tokens verified against the provider's JWKS (signature, ``iss``, ``aud``,
    ``exp``, ``nonce``). Its state lives in the Django session under the provider's key. Errors
    as ``metadata_get``; ``ProviderUnavailable`` too when the stored client secret cannot be
    decrypted (``core.secrets``: a key dropped from ``KB_SECRET_KEYS`` too early)."""
    from authlib.integrations.django_client import DjangoIntegration, DjangoOAuth2App

    if not secret_readable(provider.client_secret):
        raise ProviderUnavailable(
            f"{provider.name}'s client secret cannot be decrypted with any key of KB_SECRET_KEYS "
            "(see `manage.py rotatekeys`)."
        )
    metadata = metadata_get(provider)
    methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    auth_method = "client_secret_basic" if "client_secret_basic" in methods else "client_secret_post"
    app = DjangoOAuth2App(
        DjangoIntegration(f"kb_sso_{provider.key}"),
        name=provider.key,
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        client_kwargs={
            "scope": provider.scopes,
            "code_challenge_method": "S256",
            "token_endpoint_auth_method": auth_method,
        },
        _loaded_at=time.time(),
        **metadata,
    )
    app.client_cls = session_class(guarded=provider.guarded)
    return app


def userinfo_fetch(provider: Provider, app, token: dict) -> dict:
    """The provider's userinfo claims for ``token`` (``{}`` when it has no userinfo endpoint).
    ``ProviderUnavailable`` when the fetch fails."""
    import requests

    endpoint = app.server_metadata.get("userinfo_endpoint")
    if not endpoint or not token.get("access_token"):
        return {}
    try:
        response = app.get(endpoint, token=token)
        response.raise_for_status()
        claims = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"Could not read {provider.name}'s userinfo: {type(exc).__name__}.") from exc
    return claims if isinstance(claims, dict) else {}
