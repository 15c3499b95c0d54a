"""Big files through ``ArchiveStore`` (docs/writing.md, "Big files") against the live service
on moto and on SeaweedFS, with 5 MiB parts past a 6 MiB threshold: zarr's ``set`` of a big
chunk and ``put_stream`` from a file-like object or from an iterator of chunks go to storage in
parts as they are read, and the commit applies them with the checksum the same tree has."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from dandizarr.client.errors import ClientError
from dandizarr_server.zarr_api.models import MultipartUpload
from tests.support.api import expected_checksum
from tests.support.live_client import Service
from tests.support.multipart import PART, THRESHOLD

PROTO = default_buffer_prototype()
BIG = os.urandom(2 * PART + 777)  # three parts


@pytest.fixture(autouse=True)
def _small_parts(settings: Any) -> None:
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = THRESHOLD
    settings.DANDIZARR_MULTIPART_PART_BYTES = PART


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` in uneven chunks, as a remote source yields them."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def public_read(service: Service, archive: str, key: str) -> bytes:
    response = requests.get(f"{service.url}/zarr/{archive}/{key}", timeout=60)
    assert response.status_code == 200, key
    return response.content


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_big_values_and_streams_go_in_parts_and_commit(
    service: Service, archive: str, opened: Any
) -> None:
    store = opened(read_only=False)
    # zarr's set of a value past the threshold.
    sync(store.set("raw/big", PROTO.buffer.from_bytes(BIG)))
    # A stream from a file-like object and from an iterator of uneven chunks.
    assert store.put_stream("raw/file", io.BytesIO(BIG[::-1]), len(BIG)) is not None
    store.put_stream("raw/iter", pieces(BIG, 3 * 1024 * 1024 + 1), len(BIG))
    store.put_stream("raw/small", pieces(b"small bytes", 4), 11)  # one PUT
    assert MultipartUpload.objects.filter(state="completed").count() == 3
    # Read your writes, before the commit.
    assert sync(store.get("raw/iter", PROTO)).to_bytes() == BIG
    checksum = store.commit()
    files = {"raw/big": BIG, "raw/file": BIG[::-1], "raw/iter": BIG, "raw/small": b"small bytes"}
    assert checksum == expected_checksum(files)
    for key, data in files.items():
        assert public_read(service, archive, key) == data
    assert MultipartUpload.objects.filter(state="proven").count() == 3


def test_a_stream_of_the_wrong_size_is_refused(service: Service, opened: Any) -> None:
    store = opened(read_only=False)
    with pytest.raises(ClientError, match="ended after"):
        store.put_stream("short", pieces(BIG[:-1], 1 << 20), len(BIG))
    with pytest.raises(ClientError, match="more bytes"):
        store.put_stream("long", io.BytesIO(BIG + b"!"), len(BIG))
    store.abort()


def test_zarr_writes_big_chunks_through_the_session(
    service: Service, archive: str, opened: Any
) -> None:
    store = opened(read_only=False)
    data = np.frombuffer(os.urandom(8 * PART), dtype="uint8").reshape(4, 2 * PART)
    array = zarr.create_array(
        store, name="a", shape=data.shape, chunks=(2, 2 * PART), dtype="uint8", compressors=None
    )
    array[:] = data
    store.commit()
    assert MultipartUpload.objects.filter(state="proven").count() == 2
    reader = zarr.open_array(store=opened(), path="a", mode="r")
    assert np.array_equal(reader[:], data)


def test_a_stream_is_read_a_few_parts_ahead_of_storage(
    service: Service, archive: str, opened: Any
) -> None:
    """Memory stays bounded: the stream is never read more than the client's ``jobs`` parts
    (plus the one being read) ahead of what storage has taken, whatever the file's size."""
    store = opened(read_only=False)
    store.client.jobs = jobs = 2
    sent = {"read": 0, "stored": 0, "ahead": 0}
    lock = threading.Lock()
    put = store.client.storage_request

    def counted_put(method: str, url: str, **kwargs: Any) -> Any:
        response = put(method, url, **kwargs)
        if method == "PUT":
            with lock:
                sent["stored"] += len(kwargs["data"])
        return response

    store.client.storage_request = counted_put
    size = 8 * PART + 5

    def source() -> Iterator[bytes]:
        for start in range(0, size, 1 << 20):
            piece = bytes(min(1 << 20, size - start))
            with lock:
                sent["read"] += len(piece)
                sent["ahead"] = max(sent["ahead"], sent["read"] - sent["stored"])
            yield piece

    store.put_stream("zeros", source(), size)
    assert sent["stored"] == size
    assert sent["ahead"] <= (jobs + 1) * PART
    assert store.commit() == expected_checksum({"zeros": bytes(size)})
