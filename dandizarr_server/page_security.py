"""The Content-Security-Policy of the service's pages (django-csp's setting), its one home."""

from __future__ import annotations

from typing import Any

# The pages: scripts, styles and images from this origin only (no inline script or style), no
# plugins, never framed. Responses that carry user bytes set their own, stricter policy
# (dandizarr.objectstore.user_bytes: sandbox; default-src 'none'), which the middleware leaves
# alone.
PAGES_CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
