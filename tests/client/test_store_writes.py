"""``ArchiveStore(..., read_only=False)`` against the live service (Django's test server, S3 on
moto over HTTP, tasks inline): zarr-python writes through a write session, reads its own
writes, and ``commit()`` makes all of it visible at once with the checksum the same tree has
written locally (docs/writing.md)."""

from __future__ import annotations

import pickle
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import zarr
from django.utils import timezone
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from dandizarr.client.errors import ApiError, ClientError, Conflict
from dandizarr.client.store import ArchiveStore
from dandizarr_server.zarr_api.domain.keys import session_prefix
from dandizarr_server.zarr_api.models import WriteSession
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.lookups import archive_get
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from tests.support.api import expected_checksum
from tests.support.killed_writer import killed_writer
from tests.support.live_client import Service

PROTO = default_buffer_prototype()
IMAGE = np.arange(64 * 48, dtype="uint16").reshape(64, 48)


def local_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write_image(store: Any) -> zarr.Array:
    group = zarr.open_group(store=store, mode="a")
    array = group.create_array("image", shape=IMAGE.shape, chunks=(16, 16), dtype="uint16")
    array[:] = IMAGE
    group.attrs["written"] = "through a session"
    return array


def image_of(store: ArchiveStore) -> Any:
    return zarr.open_array(store=store, path="image", mode="r")[:]


def public_read(service: Service, archive: str, key: str) -> requests.Response:
    return requests.get(f"{service.url}/zarr/{archive}/{key}", timeout=30)


def test_zarr_writes_through_a_session_and_commit_makes_it_visible(
    service: Service, archive: str, opened: Any, tmp_path: Path
) -> None:
    store = opened(read_only=False)
    write_image(store)
    # Read your writes, before any commit: the group, the array and its data.
    again: Any = zarr.open_group(store=store, mode="r")
    assert np.array_equal(again["image"][:], IMAGE)
    assert again.attrs["written"] == "through a session"
    assert sorted(sync(collect(store.list_dir("")))) == ["image", "zarr.json"]
    # Any other reader sees the draft as it was: nothing.
    assert public_read(service, archive, "zarr.json").status_code == 404
    assert public_read(service, archive, "image/c/0/0").status_code == 404
    assert service.archive(archive)["file_count"] == 0
    checksum = store.commit()
    # The same tree written locally has the same checksum.
    write_image(LocalStore(tmp_path / "local.zarr"))
    files = local_files(tmp_path / "local.zarr")
    assert checksum == expected_checksum(files) == service.archive(archive)["checksum"]
    for key, body in files.items():
        read = public_read(service, archive, key)
        assert (read.status_code, read.content) == (200, body), key
    reader = opened()
    assert np.array_equal(zarr.open_array(store=reader, path="image", mode="r")[:], IMAGE)
    with pytest.raises(ValueError):
        sync(store.set("late", PROTO.buffer.from_bytes(b"x")))


async def _collect(iterator: Any) -> list[str]:
    return [item async for item in iterator]


def collect(iterator: Any) -> Any:
    return _collect(iterator)


def test_delete_and_overwrite_read_back_and_abort_changes_nothing(
    service: Service, archive: str, opened: Any
) -> None:
    first = opened(read_only=False)
    write_image(first)
    before = first.commit()
    store = opened(read_only=False)
    array = zarr.open_array(store=store, path="image", mode="r+")
    array[:16, :16] = 7
    sync(store.delete_dir("image/c/3"))
    sync(store.delete("zarr.json"))
    assert not sync(store.exists("zarr.json"))
    assert not [k for k in sync(collect(store.list_prefix("image/c/3/")))]
    assert "3" not in sync(collect(store.list_dir("image/c")))
    assert (image_of(store)[:16, :16] == 7).all()
    store.abort()
    assert service.archive(archive)["checksum"] == before
    assert public_read(service, archive, "zarr.json").status_code == 200
    prefix = session_prefix(archive, str(store.session_id))
    assert list(get_store().list(prefix)) == []


def test_a_conflicting_commit_raises_conflict_and_changes_nothing(
    service: Service, archive: str, opened: Any
) -> None:
    write = opened(read_only=False)
    write_image(write)
    write.commit()
    slow, fast = opened(read_only=False), opened(read_only=False)
    zarr.open_array(store=slow, path="image", mode="r+")[:16, :16] = 1
    zarr.open_array(store=fast, path="image", mode="r+")[:16, :16] = 2
    checksum = fast.commit()
    with pytest.raises(Conflict) as raised:
        slow.commit()
    assert raised.value.code == "session_conflict"
    assert service.archive(archive)["checksum"] == checksum
    # Disjoint sessions both commit.
    left, right = opened(read_only=False), opened(read_only=False)
    zarr.open_array(store=left, path="image", mode="r+")[:16, 16:32] = 3
    zarr.open_array(store=right, path="image", mode="r+")[48:, 32:] = 4
    left.commit()
    right.commit()
    image = image_of(opened())
    assert (image[:16, :16] == 2).all() and (image[:16, 16:32] == 3).all()
    assert (image[48:, 32:] == 4).all()


def test_a_commit_sent_again_after_it_took_answers_that_commit(
    service: Service, archive: str, opened: Any
) -> None:
    """A commit whose first try timed out on the client and was sent again: the second try
    finds the session committed by the first, and answers its batch instead of a 409
    ``session_ended`` (a commit that happened reported as failed)."""
    store = opened(read_only=False)
    write_image(store)
    checksum = store.commit()
    again = store.client.commit_session(archive, store.session_id)
    assert again["state"] == "committed" and again["batch"] is not None
    assert service.archive(archive)["checksum"] == checksum
    # A session that ended otherwise is still refused.
    aborted = opened(read_only=False)
    zarr.open_array(store=aborted, path="image", mode="r+")[:16, :16] = 1
    aborted.abort()
    with pytest.raises(Conflict) as raised:
        aborted.client.commit_session(archive, aborted.session_id)
    assert raised.value.code == "session_ended"


def test_the_store_pickles_into_the_same_session(
    service: Service, archive: str, opened: Any
) -> None:
    store = opened(read_only=False)
    group = zarr.open_group(store=store, mode="a")
    group.create_array("image", shape=IMAGE.shape, chunks=(16, 16), dtype="uint16")
    copy = pickle.loads(pickle.dumps(store))
    assert copy == store and copy.session_id == store.session_id and not copy.read_only
    # The copy (a Dask worker's) reads the metadata the original wrote, and writes chunks.
    zarr.open_array(store=copy, path="image", mode="r+")[:] = IMAGE
    copy.close()
    store.commit()
    assert np.array_equal(zarr.open_array(store=opened(), path="image", mode="r")[:], IMAGE)


def test_a_write_that_fails_behind_fails_the_commit_and_a_copy_fails_at_once(
    service: Service, archive: str, opened: Any
) -> None:
    write_image(first := opened(read_only=False))
    before = first.commit()
    store = opened(read_only=False)
    # A file where the draft has a directory: the service refuses to stage it (400). The store
    # that began the session writes behind, so its set returns; the failure comes at the flush.
    sync(store.set("image", PROTO.buffer.from_bytes(b"not a directory")))
    with pytest.raises(ClientError) as raised:
        store.commit()
    assert isinstance(raised.value.__cause__, ApiError)
    assert raised.value.__cause__.status == 400
    with pytest.raises(ClientError):  # and every later write
        sync(store.set("more", PROTO.buffer.from_bytes(b"x")))
    assert service.archive(archive)["checksum"] == before
    # A copy joining a session (a Dask worker's) writes through: its set raises at once.
    copy = pickle.loads(pickle.dumps(opened(read_only=False)))
    with pytest.raises(ApiError) as refused:
        sync(copy.set("image", PROTO.buffer.from_bytes(b"not a directory")))
    assert refused.value.status == 400


def test_a_writer_killed_mid_session_leaves_the_draft_as_it_was(
    service: Service, archive: str, opened: Any
) -> None:
    write_image(first := opened(read_only=False))
    before = first.commit()
    session_id = killed_writer(service.url, archive, service.token)
    assert service.archive(archive)["checksum"] == before
    prefix = session_prefix(archive, session_id)
    assert list(get_store().list(prefix))  # what it staged, until the sweep
    # The next session commits while the dead one is open.
    store = opened(read_only=False)
    zarr.open_array(store=store, path="image", mode="r+")[:16, :16] = 9
    after = store.commit()
    assert after != before
    # The dead session expires and what it staged is collected.
    WriteSession.objects.filter(session_id=session_id).update(
        expires=timezone.now() - timedelta(seconds=1)
    )
    write_sessions_sweep()
    assert WriteSession.objects.get(session_id=session_id).state == "expired"
    assert list(get_store().list(prefix)) == []
    assert service.archive(archive)["checksum"] == after
    time.sleep(0)


def test_a_session_reads_the_draft_as_it_began_whatever_commits_meanwhile(
    service: Service, archive: str, opened: Any, tmp_path: Path, settings: Any
) -> None:
    """Snapshot isolation through the store: an upload that changes, deletes and adds files the
    session does not write commits while the session is open; every read of the session
    (``get``, ``exists``, ``list``, ``list_dir``, ``list_prefix``) still sees its own writes over
    the draft as it began, garbage collection meanwhile takes nothing that reads, and after the
    commit the draft holds both."""
    root = tmp_path / "image.zarr"
    write_image(LocalStore(root))
    client = service.client()
    assert client.upload(root, zarr_id=archive).ok
    # A session's file is read from the one-member shard it was staged as, not a loose copy.
    earlier = opened(read_only=False)
    zarr.open_array(store=earlier, path="image", mode="r+")[32:48, :16] = 5  # image/c/2/0
    earlier.commit()
    base = local_files(root)
    base["image/c/2/0"] = sync(opened().get("image/c/2/0", PROTO)).to_bytes()
    store = opened(read_only=False)
    zarr.open_array(store=store, path="image", mode="r+")[:16, :16] = 7  # image/c/0/0
    # Another writer: chunks changed (image/c/2/0 back to the local tree's), one deleted, a file
    # added.
    zarr.open_array(store=LocalStore(root), path="image", mode="r+")[48:, 32:] = 4
    (root / "image/c/1/1").unlink()
    (root / "added.txt").write_bytes(b"added")
    assert client.upload(root, zarr_id=archive, sync=True).ok
    now = opened()
    assert sync(now.exists("added.txt")) and not sync(now.exists("image/c/1/1"))
    began = IMAGE.copy()
    began[:16, :16], began[32:48, :16] = 7, 5

    def reads_as_it_began(store: ArchiveStore) -> None:
        assert np.array_equal(image_of(store), began)
        assert not sync(store.exists("added.txt"))
        assert sync(store.get("added.txt", PROTO)) is None
        for key in ("image/c/1/1", "image/c/2/0", "image/c/3/2"):
            read = sync(store.get(key, PROTO))
            assert read is not None and read.to_bytes() == base[key], key
        assert sorted(sync(collect(store.list()))) == sorted(base)
        assert sorted(sync(collect(store.list_dir("")))) == ["image", "zarr.json"]
        assert "1" in sync(collect(store.list_dir("image/c/1")))
        assert sorted(sync(collect(store.list_prefix("image/c/3/")))) == [
            f"image/c/3/{j}" for j in range(3)
        ]

    reads_as_it_began(store)
    # Garbage collection while the session is open keeps what its snapshot reads (a copy of
    # the store reads afresh: nothing cached).
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    archive_garbage_collect(archive_get(archive, None), dry_run=False, now=timezone.now())
    reads_as_it_began(copy := pickle.loads(pickle.dumps(store)))
    copy.close()
    # Disjoint paths: the commit takes, and the draft has both writers' changes.
    checksum = store.commit()
    after = opened()
    expected = IMAGE.copy()
    expected[:16, :16], expected[48:, 32:], expected[16:32, 16:32] = 7, 4, 0
    assert np.array_equal(image_of(after), expected)
    assert sync(after.get("added.txt", PROTO)).to_bytes() == b"added"
    assert "1" not in sync(collect(after.list_dir("image/c/1")))
    assert service.archive(archive)["checksum"] == checksum
