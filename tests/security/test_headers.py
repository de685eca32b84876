"""Security headers: the Content-Security-Policy, framing, sniffing and referrer headers, and the
production settings that ``manage.py check --deploy`` approves (KB_HTTPS=true)."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document
from knowledge.services import documents_ingest

ROOT = Path(__file__).resolve().parents[2]
ASK = reverse("portal:ask")


def policy(response) -> dict[str, list[str]]:
    """The response's Content-Security-Policy as {directive: [sources]}."""
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in (part.strip() for part in header.split(";")) if d}


def inline_code(html: str) -> list[str]:
    """Inline scripts, inline style blocks and style/on* attributes in ``html``."""
    return (
        re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
        + re.findall(r"<style\b", html)
        + re.findall(r"\sstyle=\"", html)
        + re.findall(r"\son[a-z]+=\"", html)
    )


def test_portal_pages_get_a_policy_without_inline_script_or_style_and_deny_framing(client, corpus, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "how long to boil spaghetti"})
    csp = policy(response)
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def test_portal_pages_carry_no_inline_script_or_style_the_policy_would_block(client, tenant, source, member, settings):
    settings.KB_SCORE_ANSWERS = True  # the scores badge too
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[ReadDocument(external_id="pasta", title="Pasta", text="Pasta\n\nBoil spaghetti for ten minutes.")],
    )
    document = Document.objects.for_tenant(tenant).get()
    assert inline_code(client.get(reverse("portal:login")).content.decode()) == []
    client.force_login(member)
    pages = {
        "ask": client.get(ASK),
        "answer": client.post(ASK, {"question": "how long to boil spaghetti"}),
        "document": client.get(reverse("portal:document", args=[document.pk])),
        "streamed answer": client.post(reverse("portal:ask-stream"), {"question": "how long to boil spaghetti"}),
    }
    for name, response in pages.items():
        html = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200, name
        assert inline_code(html.decode().replace('\\"', '"')) == [], name
    assert b"cited" in b"".join(pages["answer"].content.split())  # the scores badge was rendered


def test_the_admin_and_the_api_docs_allow_inline_styles_but_never_inline_scripts(client, admin_member):
    client.force_login(admin_member)
    for url in (reverse("admin:index"), reverse("api-docs")):
        response = client.get(url)
        assert response.status_code == 200, url
        csp = policy(response)
        assert csp["script-src"] == ["'self'"], url
        assert csp["style-src"] == ["'self'", "'unsafe-inline'"], url


def test_the_api_docs_load_swagger_ui_from_this_server_with_no_inline_script(client, member):
    client.force_login(member)
    html = client.get(reverse("api-docs")).content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts and all(src.startswith("/") for src in scripts), scripts  # no CDN: works offline
    assert not re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert "cdn" not in html
    start_up = [src for src in scripts if "script" in src and "static" not in src]
    assert start_up and b"SwaggerUIBundle" in client.get(start_up[0]).content


PRODUCTION = {
    "DEBUG": "false",
    "KB_HTTPS": "true",
    "ALLOWED_HOSTS": "kb.example.com",
    # A Fernet key of its own for stored secrets (without one, check --deploy warns core.W006).
    "KB_SECRET_KEYS": "ZmRlcmpuZXQta2V5LWZvci10ZXN0cy0wMTIzNDU2Nzg=",
}


def manage_py_check_deploy(extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DEBUG", "KB_HTTPS", "ALLOWED_HOSTS", "SECRET_KEY", "KB_SECRET_KEYS")
    }
    env.update(DJANGO_SETTINGS_MODULE="config.settings", **extra_env)
    code = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('check', '--deploy', '--fail-level', 'WARNING')"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_check_deploy_passes_with_production_settings():
    result = manage_py_check_deploy({**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(60)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("change", "warning"),
    [({"KB_HTTPS": "false"}, "security.W008"), ({"DEBUG": "true"}, "security.W018")],
)
def test_check_deploy_fails_without_https_or_with_debug_on(change, warning):
    result = manage_py_check_deploy({**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(60), **change})
    assert result.returncode != 0
    assert warning in result.stderr


def test_kb_https_turns_on_hsts_secure_cookies_and_the_proxy_header():
    env = {k: v for k, v in os.environ.items() if k not in ("KB_HTTPS",)}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", KB_HTTPS="true", KB_HSTS_SECONDS="600")
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True 600 True True True ('HTTP_X_FORWARDED_PROTO', 'https')"


def test_over_https_pages_get_hsts_and_plain_http_is_redirected(client, db, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 600
    response = client.get(reverse("portal:login"))
    assert response.status_code == 301 and response["Location"].startswith("https://")
    response = client.get(reverse("portal:login"), HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 200
    assert response["Strict-Transport-Security"].startswith("max-age=600")
