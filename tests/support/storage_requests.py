"""Every HTTP request an ``S3ObjectStore`` of this process sends: botocore's (through its
endpoint) and the presigned ones sent over the client's own connections (``s3_puts``,
``s3_gets``) alike, since both go out through the client's HTTP session."""

from __future__ import annotations

from typing import Any

import pytest

from dandizarr.objectstore.s3 import S3ObjectStore, _http_session


def record_s3_requests(store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gets ``"METHOD path?query Range"`` for each request ``store`` sends from
    now on (until the test ends)."""
    seen: list[str] = []
    http = _http_session(store.client)
    send = http.send

    def counted(request: Any) -> Any:
        path = request.url.split("/", 3)[-1]
        seen.append(f"{request.method} {path} {request.headers.get('Range')}")
        return send(request)

    monkeypatch.setattr(http, "send", counted)
    return seen
