"""Fuzz every operation of the served OpenAPI schema: no input gets a 5xx (issue #16).

Schemathesis generates requests from ``/api/schema/`` (``MAX_EXAMPLES`` per operation), sent
with an owner's token to the live server (PostgreSQL, S3 on moto's server). Each generated
request is also sent with its path parameters pointing at real rows (a dandiset, its draft, an
archive with files, an asset, a batch), so bodies and queries reach the services too.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from rest_framework.authtoken.models import Token

from dandizarr_server.zarr_api.models import Batch
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, upload
from tests.support.hypothesis_profiles import examples
from tests.support.versions import publish

MAX_EXAMPLES = examples(20)  # per operation


@pytest.fixture
def real_parameters(owner: Actor, dandiset: str, zarr_id: str) -> dict[str, str]:
    ensure_storage_versioning()  # as ensure_bucket sets a bucket up
    assert upload(owner.client, zarr_id, {"a/b": b"1", "c": b"2"}).status_code == 200
    asset = owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "a.zarr", "zarr_id": zarr_id},
        format="json",
    ).json()["asset_id"]
    publish(owner, dandiset)  # version 1 of the archive, for the versions routes
    batch = Batch.objects.filter(archive__zarr_id=zarr_id).first()
    assert batch is not None
    session = owner.client.post(f"/api/zarr/{zarr_id}/sessions/", format="json")
    assert session.status_code == 201, session.content
    session_id = session.json()["session_id"]
    # A big file of the session, sent in parts (the service's threshold: 1 GiB).
    big = owner.client.post(
        f"/api/zarr/{zarr_id}/sessions/{session_id}/uploads/",
        {"path": "big", "size": (1 << 30) + 1},
        format="json",
    )
    assert big.status_code == 201, big.content
    link = owner.client.post(f"/api/zarr/{zarr_id}/read-links/", {"expires_in": 600}, format="json")
    assert link.status_code == 201, link.content
    return {
        "link_id": str(link.json()["id"]),
        "session_id": session_id,
        "upload": str(big.json()["upload"]),
        "identifier": dandiset,
        "version": "draft",
        "zarr_id": zarr_id,
        "asset_id": asset,
        "batch_id": str(batch.pk),
        "path": "a/b",
        "number": "1",
    }


def test_no_generated_request_gets_a_5xx(
    live_server: Any, owner: Actor, real_parameters: dict[str, str], capsys: Any
) -> None:
    token = Token.objects.get(user=owner.user).key
    headers = {"Authorization": f"Token {token}"}
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    operations = [result.ok() for result in schema.get_all_operations()]
    calls = 0
    server_errors: list[str] = []

    def send(case: Any) -> None:
        nonlocal calls
        response = case.call(base_url=live_server.url, headers=headers, timeout=60)
        calls += 1
        if response.status_code >= 500:
            server_errors.append(
                f"{case.method} {case.formatted_path} {case.query} {str(case.body)[:200]!r} -> "
                f"{response.status_code} {response.text[:300]}"
            )

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            send(case)
            real = {k: real_parameters[k] for k in (case.path_parameters or {})}
            if real:
                case.path_parameters = {**case.path_parameters, **real}
                send(case)

        fuzz()
    with capsys.disabled():
        print(
            f"\nschemathesis: {len(operations)} operations, {calls} requests "
            f"(at most {MAX_EXAMPLES} generated cases per operation, each also sent with real "
            f"path parameters), {len(server_errors)} answered 5xx"
        )
    assert server_errors == [], "\n".join(server_errors[:20])
