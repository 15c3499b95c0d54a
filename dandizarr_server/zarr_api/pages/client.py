"""``GET /client/dandizarr-X.Y.Z-py3-none-any.whl``: the client matching this server, for
``pip install <this URL>`` on another machine (dandizarr_server.client_wheel builds it, once),
limited per address (``DANDIZARR_THROTTLE_CLIENT_DOWNLOADS``)."""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from dandizarr_server.client_wheel import client_wheel, wheel_name
from dandizarr_server.zarr_api.edge.exceptions import error_response
from dandizarr_server.zarr_api.edge.throttles import CLIENT_DOWNLOAD_THROTTLES, throttled_by

# Under the data directory: one built wheel per set of sources, kept across restarts.
CACHE_DIRECTORY = "client"


@require_safe
@throttled_by(CLIENT_DOWNLOAD_THROTTLES, "the client's wheel from this address")
def client_wheel_download(request: HttpRequest, filename: str) -> HttpResponse | FileResponse:
    if filename != wheel_name():
        return error_response(
            404, f"this server's client is {wheel_name()}, not {filename}", code="not_found"
        )
    path = client_wheel(settings.DATA_DIR / CACHE_DIRECTORY)
    return FileResponse(
        path.open("rb"),
        as_attachment=True,
        filename=path.name,
        content_type="application/octet-stream",
    )
