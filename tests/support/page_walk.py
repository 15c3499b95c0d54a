"""The walk of a production-shaped service's pages that the install tests share (the image's,
the installed wheel's): every page of an uploaded archive answers with what it must show, and
the static files those pages load are served (ours as the checkout has them)."""

from __future__ import annotations

from pathlib import Path

import requests

STATIC = Path(__file__).resolve().parents[2] / "dandizarr_server/zarr_api/static/dandizarr"


def walk_pages(url: str, zarr_id: str, archive_name: str) -> None:
    """The pages of the service at ``url`` and of its archive ``zarr_id`` (named
    ``archive_name``, with a ``zarr.json`` at its root), their static files, the API docs, the
    admin's login and Neuroglancer."""
    pages = {
        "/": archive_name,
        f"/archives/{zarr_id}/": archive_name,
        f"/archives/{zarr_id}/tree/": "zarr.json",
        "/api/docs/": "swagger-ui-bundle.js",
        "/admin/login/": "csrfmiddlewaretoken",
        "/neuroglancer/": "",
    }
    for path, text in pages.items():
        page = requests.get(url + path, timeout=30)
        assert page.status_code == 200, (path, page.status_code, page.text[:2000])
        assert text in page.text, path
    for name in ["style.css", "neuroglancer-offline.js"]:
        served = requests.get(f"{url}/static/dandizarr/{name}", timeout=30)
        assert served.status_code == 200, name
        assert served.content == (STATIC / name).read_bytes(), name
    for path in [
        "/static/admin/css/base.css",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
    ]:
        assert requests.get(url + path, timeout=30).status_code == 200, path
