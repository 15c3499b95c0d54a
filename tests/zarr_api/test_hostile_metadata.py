"""No stranger's metadata can hurt the service: a corpus of hostile array and OME documents
(200 bytes declaring 10**30 pixels, 64 dimensions, a shard of 2**40 inner chunks, zero and
negative extents, multiscales whose levels are such arrays, JSON nested a million deep or
larger than any document read) walked through every anonymous read route. Each answers a clear
4xx or a bounded page, quickly, with the process's memory growth bounded: every number from
metadata is used arithmetically or after a bound (dandizarr.sharding.array_metadata's
MAX_RANK and MAX_EXTENT, dandizarr.ome's MAX_* limits), never as a loop count.

Like the privacy walk, every route of the project is in ``ROUTES``: walked here, or named as
reading no user metadata. A route added to the project and not here fails the walk.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.support.api import Actor, create_archive, upload
from tests.support.cost_bounds import cpu_scale
from tests.support.peak_memory import peak_growth
from tests.support.routes import project_routes, route_url

# The CPU one anonymous request may cost (this process's CPU time, every thread: the view, its
# render threads, moto's storage answering it; CPU rather than wall time, so a loaded machine
# does not fail the walk), and how much the process may grow over a walk. A request that hangs
# is stopped at HANG_SECONDS of wall time (a failure, not a stuck suite).
REQUEST_CPU_SECONDS = 1.0
HANG_SECONDS = 20
GROWTH_BYTES = 200 << 20


def v3_array(shape: Any, chunks: Any, codecs: Any = None, **extra: Any) -> bytes:
    return json.dumps(
        {
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": codecs or [{"name": "bytes"}], **extra,
        }
    ).encode()  # fmt: skip


def v2_array(shape: Any, chunks: Any, **extra: Any) -> bytes:
    return json.dumps(
        {
            "zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "|u1",
            "compressor": None, "fill_value": 0, "order": "C", "filters": None, **extra,
        },
        separators=(",", ":"),
    ).encode()  # fmt: skip


def sharded(shape: list[int], shard: list[int], inner: list[int]) -> bytes:
    codec = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner,
            "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
        },
    }
    return v3_array(shape, shard, [codec])


def nested_sharding(depth: int) -> bytes:
    """A sharded array whose inner chain holds a sharded chain, ``depth`` levels deep (issue
    #47, finding 1: 200 deep and more was a RecursionError, a 500 on every view)."""
    codecs: list[Any] = [{"name": "bytes"}]
    for _ in range(depth):
        config = {"chunk_shape": [1, 1], "codecs": codecs}
        codecs = [{"name": "sharding_indexed", "configuration": config}]
    return v3_array([8, 8], [8, 8], codecs)


# Issue #47, finding 2: fill values no reader converts (each was a 500: OverflowError,
# IndexError), in both formats.
BAD_FILLS = {
    "inf-uint8/zarr.json": v3_array([8, 8], [8, 8], fill_value=float("inf")),
    "inf-uint8-v2/.zarray": v2_array([8, 8], [8, 8], fill_value=float("inf")),
    "e400-float32/zarr.json": v3_array([8, 8], [8, 8], data_type="float32", fill_value=10**400),
    "e400-float32-v2/.zarray": v2_array([8, 8], [8, 8], dtype="<f4", fill_value=10**400),
    "hex-float32/zarr.json": v3_array([8, 8], [8, 8], data_type="float32", fill_value="0x"),
    "hex-float32-v2/.zarray": v2_array([8, 8], [8, 8], dtype="<f4", fill_value="0x"),
    "e400-complex64/zarr.json": v3_array(
        [8, 8], [8, 8], data_type="complex64", fill_value=[10**400, 0]
    ),
    "e400-complex64-v2/.zarray": v2_array([8, 8], [8, 8], dtype="<c8", fill_value=[10**400, 0]),
}
# Issue #47, finding 6: a v2 array of 80,000 filters (under a megabyte) was listed whole on
# the archive page (1.5 MB of HTML). The page names MAX_LISTED and counts the rest.
FILTERS = 80_000
MAX_PAGE_BYTES = 200 << 10


def deep_json(depth: int) -> bytes:
    return (
        b'{"zarr_format": 3, "node_type": "array", "shape": ' + b"[" * depth + b"]" * depth + b"}"
    )


def multiscales(levels: list[str], axes: int, channels: int = 0, scales: bool = True) -> bytes:
    """An NGFF 0.4 ``.zattrs``: one image of ``levels``, ``axes`` axes, ``channels`` channels."""
    transforms = [{"type": "scale", "scale": [1] * axes}] if scales else None
    datasets = [
        {"path": path, **({"coordinateTransformations": transforms} if transforms else {})}
        for path in levels
    ]
    image = {
        "version": "0.4",
        "axes": [{"name": f"a{i}", "type": "space"} for i in range(axes)],
        "datasets": datasets,
    }
    omero = {"channels": [{"label": f"c{i}", "color": "FF00FF"} for i in range(channels)]}
    return json.dumps({"multiscales": [image], "omero": omero}).encode()


# Each archive of the corpus: {path: bytes}.
ARRAYS = {
    "huge/zarr.json": v3_array([10**30, 10**30], [64, 64]),
    "huge2/.zarray": v2_array([10**30, 10**30], [64, 64]),
    "ones/zarr.json": v3_array([2**62, 2**62], [1, 1]),
    "cube/zarr.json": v3_array([10**20] * 3, [64] * 3),
    "rank64/zarr.json": v3_array([2] * 64, [1] * 64),
    "rank64v2/.zarray": v2_array([2] * 64, [1] * 64),
    "shard40/zarr.json": sharded([2**20, 2**20], [2**20, 2**20], [1, 1]),
    "zero/zarr.json": v3_array([0, 10], [0, 1]),
    "negative/zarr.json": v3_array([-5, 10], [1, 1]),
    "negative2/.zarray": v2_array([10, -5], [-1, 1]),
    "float/zarr.json": v3_array([1e300, 1.5], [64, 64]),
}
CORPUS: dict[str, dict[str, bytes]] = {
    "arrays": {".zgroup": b'{"zarr_format": 2}', **ARRAYS},
    # An OME image whose levels are the hostile arrays (v2 .zattrs at the root).
    "ome-levels": {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": multiscales([p.rpartition("/")[0] for p in ARRAYS], axes=2),
        **ARRAYS,
    },
    # A .zattrs under a megabyte: 15,000 axes and 15,000 levels (a quadratic bomb for anything
    # that builds a per-axis list per level).
    "ome-wide": {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": multiscales(["ones"] * 15_000, axes=15_000, scales=False),
        "ones/zarr.json": ARRAYS["ones/zarr.json"],
    },
    # 8,000 channels and 61 images' worth of levels in one document.
    "ome-channels": {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": multiscales(["ones"] * 64, axes=2, channels=8_000),
        "ones/zarr.json": ARRAYS["ones/zarr.json"],
    },
    "deep": {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": b'{"multiscales": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "a/zarr.json": deep_json(200_000),
        "b/.zarray": b"[" * 200_000 + b"]" * 200_000,
    },
    "nested-sharding": {
        ".zgroup": b'{"zarr_format": 2}',
        # 20 deep is a document of 63 levels: read, its codecs refused past MAX_CODEC_NESTING.
        "s20/zarr.json": nested_sharding(20),
        "s200/zarr.json": nested_sharding(200),
        "s300/zarr.json": nested_sharding(300),
    },
    "fill-values": {".zgroup": b'{"zarr_format": 2}', **BAD_FILLS},
    "filters": {
        ".zgroup": b'{"zarr_format": 2}',
        "a/.zarray": v2_array([8, 8], [8, 8], filters=[{"id": "x"}] * FILTERS),
    },
    "large": {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": b'{"pad": "' + b"x" * (3 << 20) + b'"}',
        "a/zarr.json": v3_array([8, 8], [8, 8], attributes={"pad": "x" * (3 << 20)}),
    },
}

# Every route of the project: how the walk reaches it, or why it reads no user metadata.
WALKED = "walked"
ROUTES = {
    "page-archive": WALKED,
    "page-tree-root": WALKED,
    "page-tree": WALKED,
    "page-preview": WALKED,
    "zarr-ome": WALKED,
    "zarr-manifest": WALKED,
    "zarr-manifest-json": WALKED,
    "zarr-read-root": WALKED,
    "zarr-read": WALKED,
    "zarr-tree-root": WALKED,
    "zarr-tree": WALKED,
    "zarr-files": WALKED,
    "zarr-file": WALKED,
    "zarr-path": WALKED,
    "zarr": WALKED,
    "neuroglancer-viewer": WALKED,  # the links the archive's images and arrays get
    "page-home": WALKED,
    # Routes that read no array or OME metadata (rows, storage objects as bytes, the service).
    "zarr-list": "rows",
    "version": "rows",
    "version-info": "rows",
    "asset-info": "rows",
    "dandiset": "rows",
    "dandiset-list": "rows",
    "version-list": "rows",
    "asset-list": "rows",
    "asset": "rows",
    "zarr-versions": "rows",
    "zarr-version": "rows",
    "zarr-version-changes": "rows",
    "zarr-diff": "checksum listings",
    "zarr-batch": "rows",
    "zarr-batch-parts": "a write",
    "zarr-finalize": "a write",
    "zarr-ingest": "a write",
    "zarr-upload": "a write",
    "zarr-upload-add": "a write",
    "zarr-complete": "a write",
    "zarr-pack": "a write",
    "zarr-version-reset": "a write",
    "zarr-sessions": "a write",
    "zarr-session": "rows",
    "zarr-session-files": "a write",
    "zarr-session-deletions": "a write",
    "zarr-session-changes": "rows",
    "zarr-session-commit": "a write",
    "zarr-session-uploads": "a write",
    "zarr-session-upload-parts": "a write",
    "zarr-session-upload-finish": "a write",
    "zarr-read-links": "rows",
    "zarr-read-link": "a write",
    # zarr-read's view behind a secret (walked as zarr-read, which interprets the same bytes).
    "link-read-root": "zarr-read's view",
    "link-read": "zarr-read's view",
    "unembargo": "a write",
    "publish": "a write",
    "schema": "the service",
    "docs": "the service",
    "server-info": "the service",
    "auth-token": "the service",
    "info": "the service",
    "healthz": "the service",
    "readyz": "the service",
    "metrics": "the service",
    "neuroglancer": "the service",
    "neuroglancer-file": "the service",
    "client-wheel": "the service",
    "local-storage-object": "signed storage bytes",
}


def test_every_route_is_in_the_corpus_walk() -> None:
    names = project_routes()
    assert names - set(ROUTES) == set(), "new routes: add them to ROUTES, walked or why not"
    assert set(ROUTES) - names == set(), "ROUTES names routes the project no longer has"


class Hung(Exception):
    pass


@pytest.fixture
def hang_alarm() -> Iterator[None]:
    """A request still running after HANG_SECONDS raises in it (the walk fails, not hangs)."""

    def hung(signum: int, frame: Any) -> None:
        raise Hung(f"a request ran past {HANG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, hung)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _directories(files: dict[str, bytes]) -> list[str]:
    found = {p.rpartition("/")[0] for p in files if "/" in p}
    return sorted(found)


def _walk_urls(zarr_id: str, files: dict[str, bytes]) -> Iterator[tuple[str, str]]:
    values = {"zarr_id": zarr_id, "path": "", "key": ""}
    yield "page-home", route_url("page-home", values)
    yield "zarr", route_url("zarr", values)
    for name in ("page-archive", "page-tree-root", "zarr-ome", "zarr-manifest"):
        yield name, route_url(name, values)
    yield "zarr-manifest-json", route_url("zarr-manifest-json", values)
    yield "zarr-read-root", route_url("zarr-read-root", values)
    yield "zarr-tree-root", route_url("zarr-tree-root", values)
    yield "zarr-files", route_url("zarr-files", values) + "?recursive=true"
    yield "page-preview", route_url("page-preview", values)
    for directory in _directories(files):
        at = {**values, "path": directory + "/", "key": directory + "/"}
        yield "page-tree", route_url("page-tree", at)
        yield "zarr-read", route_url("zarr-read", at)
        yield "zarr-tree", route_url("zarr-tree", {**values, "path": directory})
        yield "zarr-path", route_url("zarr-path", {**values, "path": directory + "/"})
        yield "page-preview", route_url("page-preview", values) + f"?array={directory}"
    for path in files:
        yield "zarr-file", route_url("zarr-file", {**values, "path": path})
        yield "zarr-read", route_url("zarr-read", {**values, "key": path})


def _get(client: Client, url: str) -> tuple[Any, float]:
    """The response and the CPU seconds the process spent answering it."""
    started = time.process_time()
    signal.alarm(HANG_SECONDS)
    try:
        response = client.get(url)
        if response.streaming:
            b"".join(response.streaming_content)
    finally:
        signal.alarm(0)
    return response, time.process_time() - started


def _neuroglancer_links(client: Client, zarr_id: str) -> list[str]:
    summary = client.get(route_url("zarr-ome", {"zarr_id": zarr_id}))
    if summary.status_code != 200:
        return []
    return [i["neuroglancer_url"] for i in summary.json()["images"] if i.get("neuroglancer_url")]


def test_the_corpus_documents_are_read_whole() -> None:
    """Each document but "large"'s is under the size a scan reads (else it tests nothing)."""
    from dandizarr.sharding.metadata_values import MAX_METADATA_BYTES

    for case, files in CORPUS.items():
        for path, data in files.items():
            big = case == "large" and path != ".zgroup"
            assert (len(data) > MAX_METADATA_BYTES) == big, (case, path)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_hostile_metadata_on_every_anonymous_read_route(
    case: str, owner: Actor, dandiset: str, s3_storage: str, settings: Any, hang_alarm: None
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "expensive_anon": "100000/min",
        },
    }
    files = CORPUS[case]
    zarr_id = create_archive(owner, dandiset, f"{case}.zarr", layout="loose")
    assert upload(owner.client, zarr_id, files).status_code == 200
    anonymous = Client()
    with peak_growth() as grown:
        seen: dict[str, int] = {}
        slow: list[str] = []
        walked: set[str] = set()
        for name, url in _walk_urls(zarr_id, files):
            response, seconds = _get(anonymous, url)
            walked.add(name)
            assert response.status_code < 500, (url, response.status_code, response.content[:500])
            if response.status_code >= 400 and response.get("Content-Type", "").startswith("app"):
                assert response.json().get("detail"), (url, response.content[:300])
            if seconds > REQUEST_CPU_SECONDS * cpu_scale():
                slow.append(f"{url}: {seconds:.2f} CPU-s")
            seen[url] = response.status_code
        for link in _neuroglancer_links(anonymous, zarr_id):
            walked.add("neuroglancer-viewer")
            response, seconds = _get(anonymous, link.split("#", 1)[0])
            assert response.status_code < 500, (link[:200], response.status_code)
            assert len(link) < 1 << 20, "a viewer link is bounded"
    assert slow == [], f"cost too much: {slow}"
    assert grown.bytes < GROWTH_BYTES, f"the process grew by {grown.bytes >> 20} MiB"
    assert walked >= {n for n, how in ROUTES.items() if how == WALKED} - {"neuroglancer-viewer"}
    # The page answers, and each hostile plain array is a clear "no preview" (an OME image's
    # levels are no plain arrays: their previews are the image's).
    page = anonymous.get(route_url("page-archive", {"zarr_id": zarr_id}))
    assert page.status_code == 200
    for directory in _directories(files):
        preview = anonymous.get(
            route_url("page-preview", {"zarr_id": zarr_id}) + f"?array={directory}"
        )
        assert preview.status_code in (200, 404), (directory, preview.status_code)
        if case == "arrays" and directory in {"huge", "huge2", "cube", "rank64"}:
            assert b"no preview" in preview.content, (directory, preview.content[:200])


def _uploaded(owner: Actor, dandiset: str, case: str) -> str:
    zarr_id = create_archive(owner, dandiset, f"{case}.zarr", layout="loose")
    assert upload(owner.client, zarr_id, CORPUS[case]).status_code == 200
    return zarr_id


def test_a_long_list_is_named_to_a_bound_and_counted(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """Issue #47, finding 6: 80,000 filters are 16 named and the rest counted, on a page of
    bounded size (the whole list was 1.5 MB of HTML), and the problem names no more of them."""
    zarr_id = _uploaded(owner, dandiset, "filters")
    page = Client().get(route_url("page-archive", {"zarr_id": zarr_id}))
    assert page.status_code == 200
    assert len(page.content) < MAX_PAGE_BYTES, f"{len(page.content):,} bytes"
    from dandizarr.ome import MAX_LISTED

    text = page.content.decode()
    assert f"and {FILTERS - MAX_LISTED} more" in text
    assert f"{FILTERS} filters" in text  # the preview's problem counts them too


def test_what_cannot_be_read_is_said_and_cached(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """Issue #47, findings 1 and 2: an array whose codecs nest too deep or whose fill value
    no type holds is a 200 page naming the problem, and that description is cached like any
    other (a 500 was never cached: every view paid again)."""
    from dandizarr_server.zarr_api.models import ZarrArchive
    from dandizarr_server.zarr_api.pages import preview

    for case, problems in {
        "nested-sharding": ["nest more than 4 levels", "nests deeper than", "nests deeper than"],
        "fill-values": ["fill_value"] * len(BAD_FILLS),
    }.items():
        zarr_id = _uploaded(owner, dandiset, case)
        page = Client().get(route_url("page-archive", {"zarr_id": zarr_id}))
        assert page.status_code == 200
        text = page.content.decode()
        assert text.count("No preview: ") == len(problems), text
        for problem in problems:
            assert problem in text
        archive = ZarrArchive.objects.get(zarr_id=zarr_id)
        cached: Any = preview.cached(archive, "overview", "", lambda: pytest.fail("recomputed"))
        assert all(a.metadata is None and a.preview_problem for a in cached.arrays)
