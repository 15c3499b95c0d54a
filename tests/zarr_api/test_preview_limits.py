"""Anyone may ask for a preview, so every preview is bounded by construction: chunk bombs are
refused before they are decompressed, a plane that spans too many chunks is refused from its
metadata, renders run in a small pool (busy: 503), outcomes (refusals too) are cached per tree
version, and the expensive reads are rate limited (429).

The figures (each attack answered in well under a second, RSS growth) come from
``python -m bench preview_bombs``."""

from __future__ import annotations

import io
import json
import threading
import time
import zlib
from typing import Any

import numcodecs
import numpy as np
import pytest
import zstandard
from django.test import Client
from PIL import Image

from dandizarr.sharding.codecs.compression import BloscCodec, DecodedSizeError, GzipCodec, ZstdCodec
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.pages import render_pool
from dandizarr_server.zarr_api.pages.arrays import describe, plane_plan
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support.api import Actor, upload

BOMB_BYTES = 64 << 20  # what each bomb chunk decompresses to
CHUNK_BYTES = 64 * 64  # what a chunk of a 64 x 64 uint8 array holds


def _zeros(total: int, block: int = 1 << 20) -> Any:
    for _ in range(total // block):
        yield bytes(block)


def gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(compressor.compress(b) for b in _zeros(BOMB_BYTES)) + compressor.flush()


def zstd_bomb(*, declared: bool) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=declared)
    chunker = compressor.chunker(size=BOMB_BYTES if declared else -1)
    out = [piece for block in _zeros(BOMB_BYTES) for piece in chunker.compress(block)]
    return b"".join(out + list(chunker.finish()))


def blosc_bomb() -> bytes:
    return bytes(numcodecs.Blosc(cname="zstd", clevel=9).encode(bytes(BOMB_BYTES)))


@pytest.mark.parametrize(
    ("codec", "bomb"),
    [
        (GzipCodec(), gzip_bomb),
        (ZstdCodec(), lambda: zstd_bomb(declared=True)),
        (ZstdCodec(), lambda: zstd_bomb(declared=False)),
        (BloscCodec(cname="zstd"), blosc_bomb),
    ],
    ids=["gzip", "zstd-declared", "zstd-streamed", "blosc"],
)
def test_codecs_refuse_a_chunk_larger_than_its_array_says(codec: Any, bomb: Any) -> None:
    data = bomb()
    assert len(data) < 1 << 20  # a small object...
    with pytest.raises(DecodedSizeError, match=f"more than {CHUNK_BYTES} bytes"):
        codec.decode(data, CHUNK_BYTES)  # ...never decompressed past its chunk's size
    # Honest chunks of the size still decode.
    honest = bytes(range(256)) * (CHUNK_BYTES // 256)
    assert bytes(codec.decode(codec.encode(honest), CHUNK_BYTES)) == honest


def _v2(compressor: dict[str, Any] | None) -> bytes:
    return json.dumps(
        {
            "zarr_format": 2, "shape": [64, 64], "chunks": [64, 64], "dtype": "|u1",
            "compressor": compressor, "fill_value": 0, "order": "C", "filters": None,
        }
    ).encode()  # fmt: skip


GRID = json.dumps(
    {
        "zarr_format": 3, "node_type": "array", "shape": [2048, 2048], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
).encode()  # fmt: skip


@pytest.fixture
def bombs(owner: Actor, zarr_id: str) -> str:
    files = {
        "grid/zarr.json": GRID,
        "zstd/.zarray": _v2({"id": "zstd", "level": 3}),
        "zstd/0.0": zstd_bomb(declared=True),
        "gzip/.zarray": _v2({"id": "gzip", "level": 9}),
        "gzip/0.0": gzip_bomb(),
        "fine/.zarray": _v2({"id": "zstd", "level": 3}),
        "fine/0.0": zstandard.ZstdCompressor().compress(bytes(range(64)) * 64),
    }
    assert upload(owner.client, zarr_id, files).status_code == 200
    return zarr_id


def _preview(zarr_id: str, array: str) -> Any:
    return Client().get(f"/archives/{zarr_id}/preview.png?array={array}")


def test_attack_files_get_a_clear_no_preview(bombs: str, settings: Any) -> None:
    # The honest preview must not run out of time on a loaded CI machine (it did, once, at 5 s):
    # the bombs are refused by their sizes, not by the clock.
    settings.DANDIZARR_PREVIEW_SECONDS = 60
    # 4,194,304 chunks in its plane: drawn from strided pixels, within the chunk budget.
    grid = _preview(bombs, "grid")
    assert grid.status_code == 200 and grid["Content-Type"] == "image/png"
    zstd = _preview(bombs, "zstd")  # a few KB: read, and refused by its declared size
    assert zstd.status_code == 404
    assert f"more than {CHUNK_BYTES} bytes" in zstd.content.decode()
    # 64 KB: longer than any gzip encoding of a 4 KiB chunk, refused before it is decompressed
    gzip = _preview(bombs, "gzip")
    assert gzip.status_code == 404
    assert "larger than any encoding of it by its codecs could be" in gzip.content.decode()
    fine = _preview(bombs, "fine")
    assert fine.status_code == 200 and fine["Content-Type"] == "image/png"
    page = Client().get(f"/archives/{bombs}/")
    assert page.status_code == 200


def test_a_refusal_is_cached_per_tree_version(bombs: str) -> None:
    first = _preview(bombs, "zstd")
    assert first.status_code == 404
    # Were the render done again, the chunk now missing would read as fill: a picture.
    get_store().delete_many([file_key(bombs, "zstd/0.0")])
    again = _preview(bombs, "zstd")
    assert (again.status_code, again.content) == (404, first.content)


def test_a_busy_renderer_answers_503(bombs: str, settings: Any) -> None:
    settings.DANDIZARR_PREVIEW_WORKERS = 1
    settings.DANDIZARR_PREVIEW_QUEUE = 0
    hold, release = threading.Event(), threading.Event()

    def occupy() -> None:
        hold.set()
        release.wait(30)

    busy = threading.Thread(target=render_pool.render, args=(occupy,))
    busy.start()
    try:
        assert hold.wait(10)
        response = _preview(bombs, "fine")
        assert response.status_code == 503
        assert int(response["Retry-After"]) >= 1
        assert "busy" in response.json()["detail"]
    finally:
        release.set()
        busy.join(10)
    assert _preview(bombs, "fine").status_code == 200  # not cached as a failure


def test_a_queued_preview_waits_no_longer_than_the_setting(bombs: str, settings: Any) -> None:
    settings.DANDIZARR_PREVIEW_WORKERS = 1
    settings.DANDIZARR_PREVIEW_QUEUE = 1  # a place in the queue, but the thread stays taken
    settings.DANDIZARR_PREVIEW_WAIT_SECONDS = 1
    hold, release = threading.Event(), threading.Event()

    def occupy() -> None:
        hold.set()
        release.wait(30)

    busy = threading.Thread(target=render_pool.render, args=(occupy,))
    busy.start()
    threading.Timer(8, release.set).start()  # before: the request waited for this
    try:
        assert hold.wait(10)
        started = time.monotonic()
        response = _preview(bombs, "fine")
        waited = time.monotonic() - started
        assert response.status_code == 503
        assert 1 <= waited < 4
        assert int(response["Retry-After"]) >= 1
        assert "busy" in response.json()["detail"]
    finally:
        release.set()
        busy.join(10)
    assert _preview(bombs, "fine").status_code == 200  # its place was given back


def test_expensive_reads_are_rate_limited(bombs: str, settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"expensive_anon": "3/min", "expensive_user": "3/min"},
    }
    client = Client()
    urls = [
        f"/archives/{bombs}/",
        f"/archives/{bombs}/tree/",
        f"/zarr/{bombs}/",
        f"/api/zarr/{bombs}/manifest.json",
    ]
    answers = [client.get(url).status_code for url in urls]
    assert answers == [200, 200, 200, 429]
    limited = client.get(f"/archives/{bombs}/preview.png?array=fine")
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) >= 1
    assert "too many requests" in limited.json()["detail"]
    # Chunk reads are never limited (viewers make thousands).
    assert client.get(f"/zarr/{bombs}/fine/0.0").status_code == 200


@pytest.mark.parametrize(
    "listing",
    [
        "/api/zarr/{id}/files/?recursive=true",
        "/api/zarr/{id}/files/?recursive=true&urls=true",
        "/api/zarr/{id}/files/?prefix=",  # the DANDI listing: every file with the prefix
        "/api/zarr/{id}/files?recursive=1",
    ],
)
def test_recursive_listings_are_rate_limited(bombs: str, settings: Any, listing: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"expensive_anon": "3/min", "expensive_user": "3/min"},
    }
    client = Client()
    url = listing.format(id=bombs)
    answers = [client.get(url).status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    limited = client.get(url)
    assert int(limited["Retry-After"]) >= 1
    assert "throttled" in limited.json()["detail"].lower()
    # One directory's listing and a file's download are not limited.
    assert client.get(f"/api/zarr/{bombs}/files/fine").status_code == 200
    download = client.get(f"/api/zarr/{bombs}/files/?prefix=fine/.zarray&download=true")
    assert download.status_code == 302


def _v3(codecs: list[Any], shape: tuple[int, ...] = (64, 64)) -> bytes:
    return json.dumps(
        {
            "zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shape)}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs,
        }
    ).encode()  # fmt: skip


def _sharding(inner: list[Any], chunk_shape: tuple[int, ...] = (32, 32)) -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": inner,
            "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
            "index_location": "end",
        },
    }


def test_codecs_around_the_sharding_codec_are_refused_with_a_reason(
    owner: Actor, zarr_id: str
) -> None:
    gzip = {"name": "gzip", "configuration": {"level": 9}}
    chains = {
        # Compression outside the shard: the whole shard would be decompressed unbounded.
        "outside": [_sharding([{"name": "bytes"}]), gzip],
        "transposed": [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            _sharding([{"name": "bytes"}]),
        ],
        "nested": [_sharding([_sharding([{"name": "bytes"}], (16, 16)), gzip])],
    }
    files = {f"{name}/zarr.json": _v3(codecs) for name, codecs in chains.items()}
    files |= {f"{name}/c/0/0": gzip_bomb() for name in chains}
    assert upload(owner.client, zarr_id, files).status_code == 200
    for name in chains:
        refused = _preview(zarr_id, name)
        assert refused.status_code == 404, name
        assert "sharding_indexed is not its chain's only codec" in refused.content.decode(), name
    page = Client().get(f"/archives/{zarr_id}/")
    assert page.status_code == 200
    assert page.content.count(b"sharding_indexed is not its chain&#x27;s only codec") == 3


def test_a_chunk_larger_than_any_encoding_of_it_is_refused_unread(
    owner: Actor, zarr_id: str
) -> None:
    # 64 x 64 uint8 chunks: 4 KiB raw, a little more compressed at worst; these objects are
    # junk of 8 MiB (random bytes: no codec's output for such a chunk).
    junk = np.random.default_rng(0).bytes(8 << 20)
    files = {
        "zstd/.zarray": _v2({"id": "zstd", "level": 3}),
        "zstd/0.0": junk,
        "raw/.zarray": _v2(None),
        "raw/0.0": junk,
    }
    assert upload(owner.client, zarr_id, files).status_code == 200
    for array in ("zstd", "raw"):
        refused = _preview(zarr_id, array)
        assert refused.status_code == 404, array
        assert "larger than any encoding of it by its codecs could be" in refused.content.decode()


def test_shard_indexes_count_toward_the_preview_budget(owner: Actor, zarr_id: str) -> None:
    # One 64 x 64 inner chunk of the middle plane (4 KiB), but its shard's index has an entry
    # for each of 4,194,304 inner chunks: 64 MiB read before any chunk.
    deep = json.loads(_v3([_sharding([{"name": "bytes"}], (1, 64, 64))], (1 << 22, 64, 64)))
    # 1,024 inner chunks in the plane, each in its own shard: 2,048 reads.
    many = json.loads(_v3([_sharding([{"name": "bytes"}], (1, 64, 64))], (2, 2048, 2048)))
    many["chunk_grid"]["configuration"]["chunk_shape"] = [2, 64, 64]
    files = {
        "deep/zarr.json": json.dumps(deep).encode(),
        "many/zarr.json": json.dumps(many).encode(),
    }
    assert upload(owner.client, zarr_id, files).status_code == 200
    deep_answer = _preview(zarr_id, "deep")
    assert deep_answer.status_code == 404
    assert "chunks and shard indexes hold 64 MiB" in deep_answer.content.decode()
    # The whole plane would take 2,048 reads: its pixels are drawn strided, within 1,024.
    plan = plane_plan(describe("many", "zarr.json", json.dumps(many).encode()).metadata)  # type: ignore[arg-type]
    assert plan is not None and not plan.whole
    assert _preview(zarr_id, "many").status_code == 200


def test_a_large_plane_is_drawn_from_strided_pixels(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    settings.DANDIZARR_PREVIEW_SECONDS = 60  # the drawing, not the clock, is under test
    # 4096 x 4096 in 64 x 64 chunks: 4,096 chunks, four times what a preview reads.
    doc = json.loads(_v2(None))
    doc |= {"shape": [4096, 4096], "chunks": [64, 64]}
    plan = plane_plan(describe("big", ".zarray", json.dumps(doc).encode()).metadata)  # type: ignore[arg-type]
    assert plan is not None and not plan.whole
    # The chunk of the first strided pixel is white, every other chunk absent (fill: black).
    first = f"{plan.rows[0] // 64}.{plan.cols[0] // 64}"
    files = {"big/.zarray": json.dumps(doc).encode(), f"big/{first}": bytes([255]) * 4096}
    assert upload(owner.client, zarr_id, files).status_code == 200
    answer = _preview(zarr_id, "big")
    assert answer.status_code == 200, answer.content
    image = Image.open(io.BytesIO(answer.content))
    assert image.size == (512, 512)
    assert image.getpixel((0, 0)) == 255 and image.getpixel((511, 511)) == 0
