"""Every error the service answers in JSON carries ``detail`` and a machine-readable ``code``,
each code it can answer is in docs/api.md's table (with its status), and the table lists no
code the service never answers."""

from __future__ import annotations

import inspect
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import rest_framework.exceptions as drf_exceptions
from django.http import JsonResponse
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from dandizarr.client import errors as client_errors
from dandizarr_server import gunicorn_worker
from dandizarr_server.zarr_api.edge import exceptions
from dandizarr_server.zarr_api.edge.throttles import too_many_requests
from dandizarr_server.zarr_api.views import server_errors
from tests.support.api import Actor, create_archive, make_actor, md5
from tests.support.sharded import array_files, build_shards

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "dandizarr_server"
DOCS = ROOT / "docs" / "api.md"

# `code=...` or `code: str = ...` (a keyword at a raise site, a class's default), then the
# string literals after it on that line (a conditional names both of its codes).
_CODE_ASSIGNMENT = re.compile(r"\bcode\s*(?::\s*str\s*)?=\s*(.+)")
_CODE_LITERAL = re.compile(r"\"([a-z][a-z0-9_]*)\"")
_DOC_ROW = re.compile(r"^\| `([a-z][a-z0-9_]*)` \| (\d{3}) \|", re.MULTILINE)


def documented_codes() -> dict[str, int]:
    return {code: int(status) for code, status in _DOC_ROW.findall(DOCS.read_text())}


def codes_in_source() -> set[str]:
    """Every code the server's source names, and those of DRF's errors it renders."""
    found: set[str] = set()
    for path in SERVER.rglob("*.py"):
        for line in path.read_text().splitlines():
            if (assigned := _CODE_ASSIGNMENT.search(line)) is not None:
                found.update(_CODE_LITERAL.findall(assigned.group(1)))
    # DRF's own errors keep their default codes (the exception handler's _drf_code); the base
    # class is never raised.
    for _, error in inspect.getmembers(drf_exceptions, inspect.isclass):
        if issubclass(error, drf_exceptions.APIException) and error is not (
            drf_exceptions.APIException
        ):
            found.add(str(error.default_code))
    return found


def test_docs_list_every_code_the_service_answers_and_no_other() -> None:
    documented = documented_codes()
    in_source = codes_in_source()
    assert in_source - documented.keys() == set(), "codes answered but not in docs/api.md"
    assert documented.keys() - in_source == set(), "codes in docs/api.md nobody answers"
    # The codes the client decides on are ones the service answers.
    assert set(client_errors.DECIDING_CODES) <= documented.keys()
    # Each domain error's default code is documented with its status.
    for error in vars(exceptions).values():
        if isinstance(error, type) and issubclass(error, exceptions.DomainError):
            assert documented[error.code] == error.status_code, error


def assert_coded(response: Any, status: int, code: str, seen: dict[str, int]) -> None:
    """A JSON error with a message and the code the docs give for its status."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert body.get("code") == code, body
    assert documented_codes()[code] == status, (code, status)
    seen[code] = status


@pytest.fixture
def alice(db: None) -> Actor:
    return make_actor("alice")


@pytest.fixture
def bob(db: None) -> Actor:
    return make_actor("bob")


def test_a_walk_of_error_answers_each_carries_detail_and_code(
    alice: Actor, bob: Actor, s3_storage: str, settings: Any
) -> None:
    seen: dict[str, int] = {}
    anonymous = APIClient()
    dandiset = alice.client.post("/api/dandisets/", {"name": "d"}, format="json").json()
    identifier = str(dandiset["identifier"])
    zarr_id = create_archive(alice, identifier, "a.zarr", layout="loose")
    upload = f"/api/zarr/{zarr_id}/upload/"
    assets = f"/api/dandisets/{identifier}/versions/draft/assets/"

    # 400s: a rule broken, a body that is not JSON, a field's error, a Host Django refuses.
    assert_coded(alice.client.get("/api/zarr/?name=a%00b"), 400, "invalid", seen)
    assert_coded(
        alice.client.post("/api/dandisets/", "{", content_type="application/json"),
        400,
        "parse_error",
        seen,
    )
    assert_coded(
        alice.client.post(assets, {"path": "x.zarr", "zarr_id": str(uuid.uuid4())}, format="json"),
        400,
        "zarr_archive_not_found",
        seen,
    )
    assert_coded(Client(HTTP_HOST="bad host!").get("/api/info/"), 400, "unknown_host", seen)

    # 401s, 403, 405, 415.
    assert_coded(anonymous.post("/api/dandisets/", {"name": "x"}), 401, "not_authenticated", seen)
    assert_coded(
        Client(HTTP_AUTHORIZATION="Token nope").get("/api/info/"),
        401,
        "authentication_failed",
        seen,
    )
    assert_coded(
        bob.client.post(upload, [{"path": "x", "etag": md5(b"x")}], format="json"),
        403,
        "permission_denied",
        seen,
    )
    assert_coded(alice.client.put("/api/info/", {}, format="json"), 405, "method_not_allowed", seen)
    assert_coded(
        alice.client.post("/api/dandisets/", "name=x", content_type="text/plain"),
        415,
        "unsupported_media_type",
        seen,
    )

    # 404s: an object, a route, a page past the end, no batch open.
    assert_coded(alice.client.get(f"/api/zarr/{uuid.uuid4()}/"), 404, "not_found", seen)
    assert_coded(alice.client.get("/api/no-such-route/"), 404, "not_found", seen)
    assert_coded(
        alice.client.get(f"/api/zarr/{zarr_id}/versions/?page=99"), 404, "page_not_found", seen
    )
    assert_coded(alice.client.post(upload + "complete/"), 404, "no_open_batch", seen)
    assert_coded(alice.client.get(upload), 404, "no_open_batch", seen)
    assert_coded(alice.client.get(f"/zarr/{zarr_id}/absent"), 404, "not_found", seen)

    # The batch conflicts a client tells apart.
    started = alice.client.post(upload, [{"path": "x", "etag": md5(b"x")}], format="json")
    assert started.status_code == 200, started.content
    assert_coded(
        alice.client.post(upload, [{"path": "y", "etag": md5(b"y")}], format="json"),
        409,
        "open_batch_exists",
        seen,
    )
    assert_coded(
        alice.client.post(upload + "complete/"), 400, "batch_incomplete", seen
    )  # nothing was PUT
    assert alice.client.delete(upload).status_code == 204
    assert_coded(
        alice.client.post(upload, {"shards": build_shards(array_files())[0]}, format="json"),
        409,
        "archive_not_sharded",
        seen,
    )
    assert_coded(
        alice.client.post(f"/api/dandisets/{identifier}/unembargo/"),
        409,
        "dandiset_not_embargoed",
        seen,
    )
    assert (
        alice.client.post(assets, {"path": "a", "zarr_id": zarr_id}, format="json").status_code
        == 201
    )
    assert_coded(
        alice.client.post(assets, {"path": "a", "zarr_id": zarr_id}, format="json"),
        409,
        "asset_exists",
        seen,
    )

    # 413, 429, 503 and 500 from the middlewares and handlers that answer outside DRF.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    assert_coded(
        alice.client.post(upload, [{"path": "x" * 200, "etag": md5(b"")}], format="json"),
        413,
        "body_too_large",
        seen,
    )
    assert_coded(too_many_requests(3), 429, "throttled", seen)
    body, status, headers = exceptions.unavailable_answer("storage", OSError("down"))
    unavailable = JsonResponse(body, status=status, headers=headers)
    assert_coded(unavailable, 503, "service_unavailable", seen)
    # What no view handled, on an API route (handler500): a bug.
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        answer = server_errors.server_error(RequestFactory().get("/api/info/"))
    assert_coded(answer, 500, "server_error", seen)

    # gunicorn's worker answers before Django; its body has the same shape.
    reply = gunicorn_worker.error_reply(408, "Request Timeout", "late", code="request_timeout")
    body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    assert body == {"detail": "late", "code": "request_timeout"}
    assert len(seen) >= 20, sorted(seen)
