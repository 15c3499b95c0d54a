"""Private (embargoed) dandisets stay private on every path: a walk over every URL pattern the
project defines, with an anonymous request and with a stranger's token, then with the owner's.

Each route is in ``ROUTES`` with what it is about; a route added to the project and not to
``ROUTES`` fails the walk, so no new read path escapes the one permission rule
(zarr_api.domain.permissions, through dandizarr_server.zarr_api.selectors.lookups). The
admin is staff-only as a whole.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dandizarr_server.zarr_api.models import Batch, Dandiset
from tests.support.api import Actor, make_actor, md5, put
from tests.support.routes import namespaced_routes, project_routes, route_url

DANDISET_NAME = "secret-dandiset-q7v"
ARCHIVE_NAME = "secret-archive-k3x.zarr"
FILES = {
    ".zgroup": b'{"zarr_format": 2}',
    "img/.zarray": (
        b'{"zarr_format": 2, "shape": [2, 2], "chunks": [2, 2], "dtype": "|u1", "order": "C",'
        b' "compressor": null, "fill_value": 0, "filters": null}'
    ),
    "img/0.0": b"\x01\x02\x03\x04",
}

# What each route is about. "private": a private object's; everyone but its owners and staff
# gets 404, exactly as for an absent one. "lists": public lists the private rows are absent
# from. "service": about no dandiset or archive. "signed": the storage endpoint, whose
# credential is a signature (an unsigned request is refused, whatever the key).
PRIVATE = "private"
# A well-formed read-link secret that opens nothing (a real one opens its archive to anyone).
NO_LINK = "A" * 43
LISTS = "lists"
SERVICE = "service"
SIGNED = "signed"
ROUTES = {
    "page-archive": PRIVATE,
    "page-tree-root": PRIVATE,
    "page-tree": PRIVATE,
    "page-preview": PRIVATE,
    "zarr-manifest": PRIVATE,
    "zarr-manifest-json": PRIVATE,
    "zarr-read-root": PRIVATE,
    "zarr-read": PRIVATE,
    "version": PRIVATE,
    "version-info": PRIVATE,
    "asset-info": PRIVATE,
    "zarr-files": PRIVATE,
    "zarr-finalize": PRIVATE,
    "zarr-ingest": PRIVATE,
    "zarr-tree-root": PRIVATE,
    "zarr-tree": PRIVATE,
    "dandiset": PRIVATE,
    "version-list": PRIVATE,
    "unembargo": PRIVATE,
    "publish": PRIVATE,
    "asset-list": PRIVATE,
    "asset": PRIVATE,
    "zarr": PRIVATE,
    "zarr-upload": PRIVATE,
    "zarr-upload-add": PRIVATE,
    "zarr-complete": PRIVATE,
    "zarr-pack": PRIVATE,
    "zarr-batch": PRIVATE,
    "zarr-batch-parts": PRIVATE,
    "zarr-file": PRIVATE,
    "zarr-path": PRIVATE,
    "zarr-versions": PRIVATE,
    "zarr-version": PRIVATE,
    "zarr-version-changes": PRIVATE,
    "zarr-diff": PRIVATE,
    "zarr-version-reset": PRIVATE,
    "zarr-ome": PRIVATE,
    "zarr-sessions": PRIVATE,
    "zarr-session": PRIVATE,
    "zarr-session-files": PRIVATE,
    "zarr-session-deletions": PRIVATE,
    "zarr-session-changes": PRIVATE,
    "zarr-session-commit": PRIVATE,
    "zarr-session-uploads": PRIVATE,
    "zarr-session-upload-parts": PRIVATE,
    "zarr-session-upload-finish": PRIVATE,
    "zarr-read-links": PRIVATE,
    "zarr-read-link": PRIVATE,
    # A link's reads: a secret that opens nothing gets what any absent row gets.
    "link-read-root": PRIVATE,
    "link-read": PRIVATE,
    "page-home": LISTS,
    "dandiset-list": LISTS,
    "zarr-list": LISTS,
    "schema": SERVICE,
    "docs": SERVICE,
    "server-info": SERVICE,
    "auth-token": SERVICE,
    "info": SERVICE,
    "healthz": SERVICE,
    "readyz": SERVICE,
    "metrics": SERVICE,
    "neuroglancer": SERVICE,
    "neuroglancer-viewer": SERVICE,
    "neuroglancer-file": SERVICE,
    "client-wheel": SERVICE,
    "local-storage-object": SIGNED,
}
# The same routes for rows that do not exist.
ABSENT = {
    "identifier": "999999",
    "zarr_id": "00000000-0000-4000-8000-000000000000",
    "version": "draft",
    "asset_id": "00000000-0000-4000-8000-000000000001",
    "batch_id": "999999",
    "session_id": "00000000-0000-4000-8000-000000000002",
    "upload": "999999",
    "path": "img/0.0",
    "key": "img/0.0",
    "storage_key": "zarr/00000000-0000-4000-8000-000000000000/img/0.0",
    "number": "1",
    "token": "dandizarr",
    "name": "no-such-file.js",
    "filename": "dandizarr-0.0.0-py3-none-any.whl",
    "link_id": "999999",
    "secret": NO_LINK,
}
# Methods a stranger tries on a private route: every one must be the absent row's 404.
METHODS = ("get", "head", "post", "put", "delete")


@pytest.fixture
def private(owner: Actor, s3_storage: str) -> dict[str, str]:
    created = owner.client.post(
        "/api/dandisets/?embargo=true", {"name": DANDISET_NAME}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["embargo_status"] == "EMBARGOED"
    identifier = created.json()["identifier"]
    zarr_id = owner.client.post(
        "/api/zarr/", {"name": ARCHIVE_NAME, "dandiset": identifier}, format="json"
    ).json()["zarr_id"]
    targets = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in FILES.items()],
        format="json",
    ).json()
    for target in targets:
        assert put(target["upload_url"], FILES[target["path"]]).status_code == 200
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    asset = owner.client.post(
        f"/api/dandisets/{identifier}/versions/draft/assets/",
        {"path": ARCHIVE_NAME, "zarr_id": zarr_id, "metadata": {}},
        format="json",
    )
    assert asset.status_code == 201, asset.content
    batch = Batch.objects.filter(archive__zarr_id=zarr_id).first()
    assert batch is not None
    session = owner.client.post(f"/api/zarr/{zarr_id}/sessions/")
    assert session.status_code == 201, session.content
    link = owner.client.post(f"/api/zarr/{zarr_id}/read-links/", {"expires_in": 600}, format="json")
    assert link.status_code == 201, link.content
    return {
        "link_id": str(link.json()["id"]),
        "secret": NO_LINK,
        "identifier": identifier,
        "zarr_id": zarr_id,
        "version": "draft",
        "asset_id": asset.json()["asset_id"],
        "batch_id": str(batch.pk),
        "session_id": session.json()["session_id"],
        "upload": "1",
        "path": "img/0.0",
        "key": "img/0.0",
        "storage_key": f"zarr/{zarr_id}/img/0.0",
        "number": "1",
        "token": "dandizarr",
        "name": "no-such-file.js",
        "filename": "dandizarr-0.0.0-py3-none-any.whl",
    }


# Query strings a route needs to name its object.
QUERIES = {"page-preview": "?array=img", "zarr-diff": "?to={zarr_id}"}


def _url(name: str, values: dict[str, str]) -> str:
    if name == "local-storage-object":  # its key is a storage key
        values = {**values, "key": values["storage_key"]}
    return route_url(name, values) + QUERIES.get(name, "").format(**values)


def _leaks(response: Any) -> list[str]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode("utf-8", "replace")
    return [name for name in (DANDISET_NAME, ARCHIVE_NAME) if name in text]


def _client(actor: Actor | None) -> Client:
    if actor is None:
        return Client()
    token = actor.client._credentials["HTTP_AUTHORIZATION"]
    return Client(HTTP_AUTHORIZATION=token)


def test_every_route_is_in_the_walk() -> None:
    names = project_routes()
    admin = namespaced_routes()
    assert admin, "the admin's routes are walked as one staff-only area"
    assert names - set(ROUTES) == set(), "new routes: add them to ROUTES, with what they are"
    assert set(ROUTES) - names == set(), "ROUTES names routes the project no longer has"


@pytest.mark.parametrize("who", ["anonymous", "stranger"])
def test_a_private_dandiset_is_absent_on_every_route(
    who: str, private: dict[str, str], transactional_db: None
) -> None:
    reader = None if who == "anonymous" else make_actor("someone-else")
    client = _client(reader)
    checked = []
    for name, about in ROUTES.items():
        url = _url(name, private)
        for method in METHODS if about == PRIVATE else ("get",):
            response = getattr(client, method)(url, content_type="application/json")
            if about == PRIVATE:
                # The answer an absent row gets: 404 (405 where the route takes no such method
                # whatever the row), never 401/403 or a 2xx.
                absent = getattr(client, method)(
                    _url(name, ABSENT), content_type="application/json"
                )
                allowed = {400, 404, 405}  # 400: a request refused before any lookup
                if reader is None:
                    # Anonymous writes are refused before any lookup; a dandiset not visible
                    # without credentials, absent or private alike, asks for them (the DANDI
                    # client signs in only then).
                    allowed.add(401)
                assert response.status_code in allowed, (method, url, response.status_code)
                assert response.status_code == absent.status_code, (method, url)
            elif about == SIGNED:  # unsigned: refused (403), or not ours to serve (S3: 404)
                assert response.status_code in (403, 404), (method, url, response.status_code)
            assert response.status_code < 500, (method, url)
            assert not _leaks(response), (method, url)
            checked.append(f"{method.upper()} {url}")
    # The admin: staff only (a redirect to its login), and it says nothing either.
    for url in ("/admin/", "/admin/zarr_api/zarrarchive/", "/admin/zarr_api/dandiset/"):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
        assert not _leaks(response)
    # Nothing was changed by the attempts.
    assert Dandiset.objects.get(pk=int(private["identifier"])).embargo_status == "EMBARGOED"
    assert len(checked) == len([r for r in ROUTES.values() if r == PRIVATE]) * 5 + len(
        [r for r in ROUTES.values() if r != PRIVATE]
    )
    print(f"\n{who}: {len(checked)} requests, every one 404 on a private route:")
    print("\n".join(checked))


def test_the_owner_and_staff_read_every_private_route(
    owner: Actor, admin_actor: Actor, private: dict[str, str]
) -> None:
    for reader in (owner, admin_actor):
        client = _client(reader)
        for name, about in ROUTES.items():
            if about != PRIVATE or name in {"unembargo", "publish"}:
                continue
            response = client.get(_url(name, private))
            body = b"".join(response.streaming_content) if response.streaming else response.content
            # Found: whatever the route answers next (200, or e.g. "no upload in progress").
            assert b"no zarr archive" not in body and b"no dandiset" not in body, name
            assert response.status_code < 500, name
        listed = client.get("/api/dandisets/").json()["results"]
        assert private["identifier"] in [d["identifier"] for d in listed]


def test_private_answers_are_for_their_reader_alone(owner: Actor, private: dict[str, str]) -> None:
    client = _client(owner)
    read = client.get(f"/zarr/{private['zarr_id']}/img/0.0")
    assert read.status_code == 200 and b"".join(read.streaming_content) == FILES["img/0.0"]
    assert "Access-Control-Allow-Origin" not in read
    assert "private" in read["Cache-Control"]
    assert "Authorization" in read["Vary"]
    api = client.get(f"/api/zarr/{private['zarr_id']}/")
    assert "private" in api["Cache-Control"]
    manifest = client.get(f"/api/zarr/{private['zarr_id']}/manifest.json?expires_in=86400")
    assert manifest.status_code == 400
    assert "private archive" in manifest.json()["detail"]


def test_an_invalid_token_is_refused_not_anonymous(private: dict[str, str]) -> None:
    response = Client(HTTP_AUTHORIZATION="Token not-a-token").get(
        f"/zarr/{private['zarr_id']}/img/0.0"
    )
    assert response.status_code == 401
    assert re.search("token", response.json()["detail"], re.IGNORECASE)
