"""Adding an asset names an archive by its id: the answer tells a user nothing about an archive
they may not read (issue #35, finding 5). A private archive's id gets the very answer a missing
id gets (status, detail, code), never the embargoed dandiset that holds it."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.api import Actor, create_archive


def _dandiset(actor: Actor, *, embargo: bool = False) -> str:
    created = actor.client.post("/api/dandisets/", {"name": "d", "embargo": embargo}, "json")
    assert created.status_code == 201, created.content
    return str(created.json()["identifier"])


def _add(actor: Actor, dandiset: str, zarr_id: str) -> Any:
    return actor.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "a.zarr", "zarr_id": zarr_id},
        format="json",
    )


def test_a_private_archive_is_answered_as_a_missing_one(
    owner: Actor, stranger: Actor, s3_storage: str
) -> None:
    private = create_archive(owner, _dandiset(owner, embargo=True), "p.zarr", layout="loose")
    mine = _dandiset(stranger)
    missing = str(uuid.uuid4())

    hidden, absent = _add(stranger, mine, private), _add(stranger, mine, missing)
    assert hidden.status_code == absent.status_code == 400
    assert hidden.json() == {
        "detail": f"no zarr archive with zarr_id {private}",
        "code": "zarr_archive_not_found",
    }
    assert absent.json() == {
        "detail": f"no zarr archive with zarr_id {missing}",
        "code": "zarr_archive_not_found",
    }
    assert (
        stranger.client.get(f"/api/dandisets/{mine}/versions/draft/assets/").json()["results"] == []
    )


def test_who_may_read_the_archive_is_told_where_it_is(
    owner: Actor, stranger: Actor, s3_storage: str
) -> None:
    embargoed = _dandiset(owner, embargo=True)
    private = create_archive(owner, embargoed, "p.zarr", layout="loose")
    open_archive = create_archive(owner, _dandiset(owner), "o.zarr", layout="loose")
    other = _dandiset(owner)

    # The owner of both dandisets: the precise reason.
    refused = _add(owner, other, private)
    assert refused.status_code == 400
    assert refused.json()["code"] == "zarr_archive_in_another_dandiset"
    assert f"belongs to dandiset {embargoed}, not {other}" in refused.json()["detail"]
    # An open archive is everyone's to see: a stranger is told where it is too.
    theirs = _add(stranger, _dandiset(stranger), open_archive)
    assert theirs.status_code == 400
    assert theirs.json()["code"] == "zarr_archive_in_another_dandiset"
    # And in its own dandiset it is added.
    assert _add(owner, embargoed, private).status_code == 201
