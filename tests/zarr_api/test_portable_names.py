"""Names that cannot coexist on the filesystems people download to are refused at batch start
(400 naming the path, and the one it clashes with; nothing changes): Windows device names,
trailing dots and spaces, bidirectional controls, and two names in one directory that differ
only by case or Unicode normalization, within the batch or against the archive. Both our
upload/ and the DANDI client's files/ go through the rule (dandizarr.checksums.paths)."""

from __future__ import annotations

from typing import Any

import pytest

from dandizarr.checksums.paths import folded_clashes, portable_path_problem
from dandizarr_server.zarr_api.models import Batch
from tests.support.api import Actor, md5, upload
from tests.support.celery_worker import needs_redis, tasks_to_worker

NFC, NFD = "caf\u00e9", "cafe\u0301"


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("a/CON", "reserves for a device"),
        ("nul.txt", "reserves for a device"),
        ("a/com1.json/x", "reserves for a device"),
        ("trailing.", "ends in a dot or a space"),
        ("dir /x", "ends in a dot or a space"),
        ("evil\u202egnp.exe", "bidirectional text control"),
    ],
)
def test_unportable_names(path: str, problem: str) -> None:
    found = portable_path_problem(path)
    assert found is not None and problem in found
    assert portable_path_problem("a/console/nullify.txt/COM10/.zarray") is None


def test_clashes_by_case_and_normal_form() -> None:
    assert folded_clashes(["a/X", "a/x", f"{NFC}/1", f"{NFD}/2", "b/x"]) == {
        "a/x": "a/X",
        NFC: NFD,  # the directories themselves (NFD sorts first)
    }


def _start(actor: Actor, zarr_id: str, paths: list[str], route: str = "upload/") -> object:
    return actor.client.post(
        f"/api/zarr/{zarr_id}/{route}", [{"path": p, "etag": md5(b"x")} for p in paths], "json"
    )


@pytest.mark.parametrize("route", ["upload/", "files/"])
def test_refused_at_batch_start(owner: Actor, zarr_id: str, route: str) -> None:
    for paths, named, said in [
        (["ok", "nul.txt"], "nul.txt", "reserves for a device"),
        (["d/A.json", "d/a.json"], "d/a.json", "differs from 'd/A.json' only by case"),
        ([f"{NFC}/x", f"{NFD}/y"], NFC, "only by case or Unicode form"),
        (["x\u202e"], "x\u202e", "bidirectional"),
    ]:
        response = _start(owner, zarr_id, paths, route)
        assert response.status_code == 400, (paths, response.content)  # type: ignore[attr-defined]
        detail = response.json()  # type: ignore[attr-defined]
        assert named in {p["path"] for p in detail["paths"]} and said in str(detail["paths"])
    assert not Batch.objects.filter(archive__zarr_id=zarr_id).exists()


def test_refused_against_what_the_archive_holds(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"Data/x.bin": b"1", NFC: b"2"}).status_code == 200
    for path, other in [("data/y.bin", "Data"), ("DATA/x.bin", "Data"), (NFD, NFC)]:
        response = _start(owner, zarr_id, [path])
        assert response.status_code == 400, path  # type: ignore[attr-defined]
        problem = response.json()["paths"][0]["problem"]  # type: ignore[attr-defined]
        assert f"differs from {other!r} in the archive" in problem
    # The same names, exactly, are fine: an overwrite.
    assert upload(owner.client, zarr_id, {"Data/x.bin": b"3"}).status_code == 200


@needs_redis
def test_refused_against_what_pending_batches_add(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    """A batch completed and not yet applied (no worker runs) counts as held: its files and the
    directories they make clash with names that differ by case, in the directory they are in."""
    with tasks_to_worker(settings):
        assert (
            upload(owner.client, zarr_id, {"Data/Sub/x.bin": b"1", "top.bin": b"2"}).status_code
            == 200
        )
        assert Batch.objects.get(archive__zarr_id=zarr_id).state == Batch.State.PENDING
        for path, other in [
            ("TOP.bin", "top.bin"),  # a pending file, at the root
            ("Data/sub/y.bin", "Data/Sub"),  # a directory a pending file makes
            ("data/z.bin", "Data"),  # and the one above it
        ]:
            response = _start(owner, zarr_id, [path])
            assert response.status_code == 400, path  # type: ignore[attr-defined]
            problem = response.json()["paths"][0]["problem"]  # type: ignore[attr-defined]
            assert f"differs from {other!r} in the archive" in problem, problem
        # A file where a pending file makes a directory.
        response = _start(owner, zarr_id, ["Data/Sub"])
        assert response.status_code == 400  # type: ignore[attr-defined]
        problem = response.json()["paths"][0]["problem"]  # type: ignore[attr-defined]
        assert problem == "is a directory in the archive", problem
        # Exactly the same names are fine.
        response = _start(owner, zarr_id, ["Data/Sub/w.bin", "top.bin"])
        assert response.status_code == 200, response.content  # type: ignore[attr-defined]
