"""Sign-in through an OpenID Connect provider: start (redirect to the provider) and callback.

``signin_start`` keeps the flow's state, nonce, PKCE verifier and where to go next in the session
(Authlib's state data) and redirects to the provider's authorization endpoint. ``signin_callback``
checks the state, exchanges the code (with the verifier) at the token endpoint, verifies the ID
token against the provider's JWKS, reads the userinfo, and hands the claims to
``sso.services.signin_complete``; then signs the user in, held to the provider's tenant for a
tenant's own provider (``core.memberships.membership_bind``). Every refusal is a page that says
why (never a 500), and a ``signin.failed`` event naming the provider and the reason, once per
window for a client address (``sso.services.signin_failure_record``); an address refused too
often is answered 429 before any work (``sso.services.signin_throttle_check``).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from core.audit import SIGNIN_DETAILS
from core.errors import ApplicationError
from core.memberships import membership_bind, membership_unbind
from sso.backends import PATH as BACKEND
from sso.providers import Provider, installation_provider, oauth_client, tenant_provider, userinfo_fetch
from sso.services import SigninRefused, signin_complete, signin_failure_record, signin_throttle_check

logger = logging.getLogger(__name__)


def _provider(slug: str | None) -> Provider:
    provider = tenant_provider(slug=slug) if slug else installation_provider()
    if provider is None:
        raise Http404("No single sign-on here.")
    return provider


def _callback_path(provider: Provider) -> str:
    if provider.tenant is None:
        return reverse("sso:callback")
    return reverse("sso:tenant-callback", kwargs={"slug": provider.tenant.slug})


def _safe_next(request: HttpRequest, value: str | None) -> str:
    if value and url_has_allowed_host_and_scheme(
        value, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return value
    return ""


def _refused(
    request: HttpRequest, provider: Provider, refused: SigninRefused, claims: dict | None = None
) -> HttpResponse:
    signin_failure_record(provider=provider, reason=refused.code, request=request, user=refused.user, claims=claims)
    context = {"provider": provider, "message": refused.message, "reason": refused.code}
    response = render(request, "sso/refused.html", context, status=refused.status)
    if refused.status == 429:
        response["Retry-After"] = str(settings.KB_SSO_REFUSAL_WINDOW_S)
    return response


def _unavailable(provider: Provider, exc: Exception) -> SigninRefused:
    logger.warning("single sign-on with %s (%s) failed: %s", provider.name, provider.issuer, exc)
    return SigninRefused(
        f"{provider.name} cannot be reached right now, or answered something this server cannot use. "
        "Try again later, or sign in with your password.",
        code="provider_unavailable",
        status=502,
    )


@require_GET
def signin_start(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Redirect to the provider's authorization endpoint (``?next=`` is where to go after); 404
    when there is no such provider; the refusal page (502) when the provider cannot be read, or
    (429) when this client address was refused too often."""
    provider = _provider(slug)
    try:
        signin_throttle_check(provider=provider, request=request)
    except SigninRefused as refused:
        return _refused(request, provider, refused)
    try:
        app = oauth_client(provider)
        redirect_uri = request.build_absolute_uri(_callback_path(provider))
        authorization = app.create_authorization_url(redirect_uri)
        next_url = _safe_next(request, request.GET.get("next"))
        app.save_authorize_data(request, redirect_uri=redirect_uri, next=next_url, **authorization)
    except ApplicationError as exc:
        return _refused(request, provider, _unavailable(provider, exc))
    return HttpResponseRedirect(authorization["url"])


def _claims(request: HttpRequest, provider: Provider) -> tuple[dict, str]:
    """The verified claims of the callback ``request`` and where to go next; ``SigninRefused``."""
    import requests
    from authlib.common.errors import AuthlibBaseError
    from authlib.integrations.base_client import OAuthError
    from joserfc.errors import JoseError

    try:
        app = oauth_client(provider)
    except ApplicationError as exc:
        raise _unavailable(provider, exc) from exc
    state = request.GET.get("state") or ""
    data = app.framework.get_state_data(request.session, state) if state else None
    if not data:
        raise SigninRefused(
            "This sign-in was not started in this browser, or has expired (its state does not match). Start again.",
            code="bad_state",
            status=400,
        )
    error = request.GET.get("error")
    if error:
        app.framework.clear_state_data(request.session, state)
        description = request.GET.get("error_description") or error
        raise SigninRefused(
            f"{provider.name} did not sign you in: {description[:200]}", code="provider_error", status=400
        )
    try:
        token = app.authorize_access_token(request)
        claims = dict(token.get("userinfo") or {})
        if not claims:
            raise SigninRefused(f"{provider.name} sent no ID token.", code="invalid_token", status=400)
        extra = userinfo_fetch(provider, app, token)
    except (ApplicationError, requests.RequestException) as exc:
        if isinstance(exc, SigninRefused):
            raise
        raise _unavailable(provider, exc) from exc
    except (OAuthError, AuthlibBaseError, JoseError, ValueError, KeyError) as exc:
        logger.warning("single sign-on with %s: refused token: %r", provider.name, exc)
        raise SigninRefused(
            f"{provider.name}'s answer could not be verified, so you are not signed in. Start again.",
            code="invalid_token",
            status=400,
        ) from exc
    if extra.get("sub") == claims.get("sub"):
        claims = {**extra, **claims}  # the verified ID token's claims win
    return claims, data.get("next") or ""


@require_GET
def signin_callback(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The provider's redirect back: sign the user in and go on to ``next`` (else the portal);
    the refusal page (400 for a bad state, provider error or unverifiable token, 403 for an
    account that may not sign in here, 429 for a client address refused too often, 502 for an
    unreachable provider) otherwise."""
    provider = _provider(slug)
    claims: dict = {}
    try:
        signin_throttle_check(provider=provider, request=request)
        claims, next_url = _claims(request, provider)
        user, tenant = signin_complete(provider=provider, claims=claims)
    except SigninRefused as refused:
        return _refused(request, provider, refused, claims)
    setattr(user, SIGNIN_DETAILS, provider.audit_details())  # core.audit puts it in signin.succeeded
    login(request, user, backend=BACKEND)
    if tenant is not None:
        membership_bind(request, slug=tenant.slug)  # a tenant's provider vouches for that tenant only
    else:
        membership_unbind(request)
    return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))
