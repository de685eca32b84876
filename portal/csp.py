"""The site's Content-Security-Policy header, with one relaxation for pages the project does not write.

The policy itself is ``settings.CONTENT_SECURITY_POLICY`` (django-csp 4.x): the portal's pages
(``templates/``, ``portal/static/portal/``) carry no inline script or style. The Django admin and
drf-spectacular's Swagger UI page put small inline ``<style>`` blocks in their own templates, so
under the URL prefixes in ``settings.KB_CSP_INLINE_STYLE_PREFIXES`` ``style-src`` also allows
``'unsafe-inline'``; scripts stay same-origin only everywhere.
"""

from __future__ import annotations

from csp.constants import UNSAFE_INLINE
from csp.middleware import CSPMiddleware, PolicyParts
from django.conf import settings


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's ``CSPMiddleware`` that also allows inline styles under the configured prefixes.

    Source: django-csp's documented extension point (subclass and extend ``get_policy_parts``).
    """

    def get_policy_parts(self, request, response, report_only: bool = False) -> PolicyParts:
        parts = super().get_policy_parts(request=request, response=response, report_only=report_only)
        prefixes = tuple(settings.KB_CSP_INLINE_STYLE_PREFIXES)
        if not report_only and prefixes and request.path_info.startswith(prefixes):
            update = dict(parts.update or {})
            update["style-src"] = [*update.get("style-src", []), UNSAFE_INLINE]
            parts.update = update
        return parts
