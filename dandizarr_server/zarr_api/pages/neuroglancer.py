"""Neuroglancer's web client, served by the service itself under ``/neuroglancer/``: the
built client the ``neuroglancer`` PyPI package ships (``neuroglancer/static/client/``), from
the installed package, nothing fetched at run time.

That build is Neuroglancer's Python-integration client: it starts only at a path ending in
``/v/<token>/`` and reads its state from the URL fragment. Its page here is the package's
``index.html`` with one script of ours first (``static/dandizarr/neuroglancer-offline.js``),
which answers the client's channel to a Python kernel (``../events/<token>``) in the page so
it neither polls nor reports a disconnection. These routes alone get the CSP Neuroglancer
needs (``'unsafe-eval'`` and ``'wasm-unsafe-eval'`` for its shaders and codecs, ``blob:``
workers, inline styles); every other page keeps the strict one. docs/neuroglancer.md.
"""

from __future__ import annotations

import functools
import importlib.util
import mimetypes
import re
from pathlib import Path

from csp.decorators import csp_update
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.templatetags.static import static
from django.utils.html import escape
from django.views.decorators.http import require_safe

from dandizarr.ome.neuroglancer_state import VIEWER_PATH

# What the client needs beyond the pages' policy (settings.CONTENT_SECURITY_POLICY).
VIEWER_CSP = {
    "script-src": ["'unsafe-eval'", "'wasm-unsafe-eval'"],
    "worker-src": ["'self'", "blob:"],
    "style-src": ["'unsafe-inline'"],
    "img-src": ["blob:"],
    "connect-src": ["blob:", "data:"],
}
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".wasm": "application/wasm",
    ".map": "application/json",
    ".html": "text/html",
}
_HASHED = re.compile(r"^[0-9a-z]+(\.[0-9a-f]{16})?\.(js|css|wasm|map)$")
_FIRST_SCRIPT = "<script"


class ClientMissing(RuntimeError):
    """The installed neuroglancer package has no built client."""


@functools.cache
def client_directory() -> Path:
    """The built client's directory in the installed ``neuroglancer`` package (found without
    importing the package, which would start its Python server machinery)."""
    spec = importlib.util.find_spec("neuroglancer")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        directory = Path(location) / "static" / "client"
        if (directory / "index.html").is_file():
            return directory
    raise ClientMissing("the neuroglancer package with its built client is not installed")


@functools.cache
def client_files() -> frozenset[str]:
    return frozenset(p.name for p in client_directory().iterdir() if p.is_file())


@functools.cache
def _page() -> str:
    page = (client_directory() / "index.html").read_text(encoding="utf-8")
    at = page.find(_FIRST_SCRIPT)
    if at < 0:
        raise ClientMissing("the neuroglancer client's index.html loads no script")
    shim = (
        f'<link rel="icon" href="{escape(static("dandizarr/favicon.svg"))}" type="image/svg+xml">'
        f'<script src="{escape(static("dandizarr/neuroglancer-offline.js"))}"></script>'
    )
    return page[:at] + shim + page[at:]


@require_safe
def viewer_root(request: HttpRequest) -> HttpResponse:
    return HttpResponseRedirect(VIEWER_PATH)


@require_safe
@csp_update(VIEWER_CSP)  # type: ignore[arg-type]  # django-csp types views as (request) only
def viewer_page(request: HttpRequest, token: str) -> HttpResponse:
    response = HttpResponse(_page(), content_type="text/html; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


@require_safe
@csp_update(VIEWER_CSP)  # type: ignore[arg-type]
def viewer_file(request: HttpRequest, token: str, name: str) -> FileResponse:
    if name not in client_files() or name == "index.html":
        raise Http404(f"no file {name!r} in the Neuroglancer client")
    path = client_directory() / name
    content_type = _TYPES.get(path.suffix) or mimetypes.guess_type(name)[0]
    response = FileResponse(
        path.open("rb"), content_type=content_type or "application/octet-stream"
    )
    response["Cache-Control"] = (
        "public, max-age=31536000, immutable" if _HASHED.match(name) else "no-cache"
    )
    return response
