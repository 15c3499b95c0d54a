"""The service's HTTP API as a model-based test drives it: in this process (Django's test
client) or over HTTP (a live service, one base URL per web process)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import requests
from rest_framework.test import APIClient


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class Api(Protocol):
    """One reader or writer of the service: ``path`` is already quoted (``quoted``)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer: ...


def quoted(path: str) -> str:
    """An archive path as it goes into a URL (spaces, non-ASCII, ``%`` and ``+`` escaped)."""
    return quote(path, safe="/")


class DjangoApi:
    """Requests through Django's test client in this process (``client``: with a token, or
    none for an anonymous reader)."""

    def __init__(self, client: APIClient) -> None:
        self.client = client

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()}
        call = getattr(self.client, method.lower())
        if method in ("GET", "HEAD"):
            response = call(path, params or {}, **extra)
        else:
            response = call(path, body, format="json", **extra)
        if getattr(response, "streaming", False):
            content = b"".join(response.streaming_content)
        else:
            content = response.content
        return Answer(response.status_code, content, dict(response.headers))


class HttpApi:
    """Requests over HTTP to one web process at ``base_url`` (``token``: "" for anonymous)."""

    def __init__(self, base_url: str, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        response = self.session.request(
            method,
            self.base_url + path,
            json=body,
            params=params,
            headers=headers,
            timeout=120,
            allow_redirects=False,
        )
        return Answer(response.status_code, response.content, dict(response.headers))
