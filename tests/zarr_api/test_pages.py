"""The pages for people: home, archive, tree browser, batch history, arrays and previews.

Archives are uploaded through the service onto moto's S3 (the bytes put into moto's model:
tests/support/pages.py ``create``); arrays are written by zarr-python."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from django.test import Client
from rest_framework.authtoken.models import Token

from dandizarr import __version__
from dandizarr.checksums import DirectoryListing, FileEntry
from dandizarr.checksums.listing import DirectoryEntry
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.pages.preview import PREVIEW_SIDE, preview_size, render_png
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree
from tests.support.api import Actor
from tests.support.pages import create, png_pixels


def picture(shape: tuple[int, ...], dtype: str = "uint16") -> np.ndarray:
    """A recognisable array: each plane a ramp plus a bright disc, planes numbered."""
    *lead, h, w = shape
    y, x = np.mgrid[0:h, 0:w]
    plane = x * 3 + y + 400 * ((y - h / 2) ** 2 + (x - w / 3) ** 2 < (h / 4) ** 2)
    planes = np.arange(int(np.prod(lead)) if lead else 1).reshape(*lead, 1, 1) * 7
    return (plane + planes).astype(dtype)


def zarr_files(tmp_path: Path, build: Any) -> dict[str, bytes]:
    """The files zarr-python writes for ``build(store)``."""
    root = tmp_path / f"z{uuid.uuid4().hex[:6]}"
    build(zarr.storage.LocalStore(root))
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def expected_preview(array: np.ndarray) -> np.ndarray:
    """What the preview of ``array`` must show: its middle plane, drawn."""
    index = tuple(n // 2 for n in array.shape[:-2])
    return png_pixels(render_png(array[index]))


V3_DATA = picture((5, 150, 200))


def v3_archive(tmp_path: Path) -> dict[str, bytes]:
    def build(store: Any) -> None:
        image = zarr.create_array(
            store, name="image", shape=V3_DATA.shape, chunks=(1, 64, 64), dtype="uint16",
            compressors=zarr.codecs.ZstdCodec(level=3),
        )  # fmt: skip
        image[...] = V3_DATA
        labels = zarr.create_array(store, name="labels", shape=(4,), chunks=(4,), dtype="int8")
        labels[...] = [1, 2, 3, 4]

    return zarr_files(tmp_path, build)


@pytest.fixture
def anonymous() -> Client:
    return Client()


def test_home_page_shows_the_service_its_commands_and_archives(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client, tmp_path: Path
) -> None:
    zarr_id = create(owner, dandiset, "brain.zarr", {"a/b.txt": b"hello"})
    response = anonymous.get("/")
    assert response.status_code == 200
    page = response.content.decode()
    assert __version__ in page
    for link in ('href="/api/docs/"', 'href="/api/schema/"', 'href="/admin/"'):
        assert link in page
    assert "export DANDIZARR_URL=http://testserver" in page
    assert "admin-token" in page and f"--dandiset {dandiset}" in page
    assert f'href="/archives/{zarr_id}/"' in page and "brain.zarr" in page
    assert ">complete<" in page and "loose" in page
    # The token itself is never shown (anyone may read this page).
    assert Token.objects.get(user=owner.user).key not in page


def test_archive_page_tree_and_file_pages(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client, tmp_path: Path
) -> None:
    files = v3_archive(tmp_path)
    zarr_id = create(owner, dandiset, "v3.zarr", files)
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["page_url"].endswith(f"/archives/{zarr_id}/")
    page = anonymous.get(f"/archives/{zarr_id}/").content.decode()
    assert archive["checksum"] in page and "dandizarr checksum ./copy.zarr" in page
    # Arrays: the 3-D image with its preview, the 1-D labels without.
    times = "\u00d7"  # the multiplication sign between sizes
    assert f"5 {times} 150 {times} 200" in page and f"1 {times} 64 {times} 64" in page
    assert "zstd(level=3" in page
    assert f"/archives/{zarr_id}/preview.png?array=image&amp;v=" in page
    assert "No preview: a 1-D array has no plane to draw" in page
    assert 'zarr.open_array(store=store, path="image"' in page and '"driver": "zarr3"' in page
    # Batches: the upload, applied.
    assert ">upload<" in page and ">applied<" in page
    # Two directories down, then a file with its md5 and a download link.
    chunks = anonymous.get(f"/archives/{zarr_id}/tree/image/c/0")
    assert chunks.status_code == 200
    assert b">1/<" in chunks.content and f"/archives/{zarr_id}/tree/image/c/0/1".encode() in (
        chunks.content
    )
    file_page = anonymous.get(f"/archives/{zarr_id}/tree/image/zarr.json").content.decode()
    import hashlib

    assert hashlib.md5(files["image/zarr.json"]).hexdigest() in file_page
    assert f"/api/zarr/{zarr_id}/files/image/zarr.json?download=true" in file_page


def test_absent_archives_paths_and_pages_are_404_pages(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client
) -> None:
    zarr_id = create(owner, dandiset, "x.zarr", {"a/b.txt": b"hello"})
    for url in [
        f"/archives/{uuid.uuid4()}/",
        "/archives/not-a-uuid/",
        f"/archives/{zarr_id}/tree/nope",
        f"/archives/{zarr_id}/tree/a/b.txt/deeper",
        f"/archives/{zarr_id}/tree/a?page=2",
        f"/archives/{zarr_id}/tree/a?page=0",
        f"/archives/{zarr_id}/preview.png?array=a",
        "/no-such-page/",
    ]:
        response = anonymous.get(url)
        assert response.status_code == 404, url
        assert b"Not found" in response.content and b"home page" in response.content, url
    assert anonymous.post(f"/archives/{zarr_id}/").status_code == 405


# The preview of a packed archive reads its shard rows in the render pool's threads.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("layout", ["loose", "packed"])
@pytest.mark.parametrize(
    "kind", ["v3-zstd", "v3-sharding-indexed", "v2-blosc-F", "v2-zstd-nested", "v2-float-nan"]
)
def test_preview_draws_the_middle_plane_reading_only_its_chunks(
    owner: Actor,
    dandiset: str,
    s3_storage: str,
    anonymous: Client,
    tmp_path: Path,
    settings: Any,
    kind: str,
    layout: str,
) -> None:
    data = picture((3, 4, 90, 130), "float32" if "float" in kind else "uint16")
    if "nan" in kind:
        data[1, 2, :10, :10] = np.nan

    def build(store: Any) -> None:
        options: dict[str, Any] = {"chunks": (1, 1, 32, 32), "dtype": data.dtype}
        if kind.startswith("v2"):
            options["zarr_format"] = 2
            options["compressors"] = (
                numcodecs.Blosc(cname="lz4", shuffle=2)
                if "blosc" in kind
                else numcodecs.Zstd(level=1)
            )
            options["order"] = "F" if "-F" in kind else "C"
            if "nested" in kind:
                options["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
        elif "sharding" in kind:
            options["shards"] = (1, 2, 64, 64)
        array = zarr.create_array(store, name="g/data", shape=data.shape, **options)
        array[...] = data

    files = zarr_files(tmp_path, build)
    zarr_id = create(owner, dandiset, f"{kind}.zarr", files)
    if layout == "packed":
        settings.DANDIZARR_SHARD_TARGET_BYTES = 8 * 32 * 32 * 4
        assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
        assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["shard_count"] > 1
    # Chunks off the middle plane are made unreadable: a preview reading one would fail.
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    chunk_paths = [p for p in files if p.startswith("g/data/") and "zarr" not in p]
    assert len(chunk_paths) > 4
    middle = ("1", "2") if "sharding" not in kind else ("1", "1")
    for path in chunk_paths:
        coords = path[len("g/data/") :].removeprefix("c/").replace(".", "/").split("/")
        if tuple(coords[:2]) != middle and layout == "loose":
            get_store().put(archive.storage_prefix + path, b"not a chunk")
    response = anonymous.get(f"/archives/{zarr_id}/preview.png", {"array": "g/data"})
    assert response.status_code == 200, response.content[:200]
    assert response["Content-Type"] == "image/png"
    pixels = png_pixels(response.content)
    assert pixels.shape == (round(90 * PREVIEW_SIDE / 130), PREVIEW_SIDE)
    np.testing.assert_array_equal(pixels, expected_preview(data))
    assert pixels.max() == 255 and pixels.min() == 0
    # The same tree version answers from the cache and to a conditional request.
    again = anonymous.get(
        f"/archives/{zarr_id}/preview.png",
        {"array": "g/data"},
        HTTP_IF_NONE_MATCH=response["ETag"],
    )
    assert again.status_code == 304


def test_a_codec_it_does_not_read_is_a_clear_no_preview(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client, tmp_path: Path
) -> None:
    def build(store: Any) -> None:
        array = zarr.create_array(
            store, name="d", shape=(8, 8), chunks=(4, 4), dtype="int32", zarr_format=2,
            compressors=numcodecs.LZMA(),
        )  # fmt: skip
        array[...] = 1

    zarr_id = create(owner, dandiset, "lzma.zarr", zarr_files(tmp_path, build))
    page = anonymous.get(f"/archives/{zarr_id}/").content.decode()
    assert "No preview: compressor &#x27;lzma&#x27; is not read" in page
    response = anonymous.get(f"/archives/{zarr_id}/preview.png", {"array": "d"})
    assert response.status_code == 404
    assert b"no preview: compressor 'lzma'" in response.content


def test_preview_size_keeps_the_aspect() -> None:
    assert preview_size(90, 130) == (512, 354)
    assert preview_size(2000, 100) == (26, 512)
    assert preview_size(3, 3) == (512, 512)


def test_a_directory_of_100000_files_pages_through(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client
) -> None:
    zarr_id = create(owner, dandiset, "big.zarr", {})
    listing = DirectoryListing()
    for i in range(100_000):
        listing.set_file(FileEntry(f"{i:06d}", "0" * 32, i))
    digest, _, size = listing.summary()
    root = DirectoryListing()
    root.set_directory(DirectoryEntry("big", digest, size))
    archive_tree(ZarrArchive.objects.get(zarr_id=zarr_id)).write_many({"": root, "big": listing})
    # How fast it opens is a benchmark's figure (python -m bench pages), not a test's.
    for page in (1, 250, 500):
        response = anonymous.get(f"/archives/{zarr_id}/tree/big", {"page": page})
        assert response.status_code == 200
        assert f"page {page} of 500 (100000 entries)".encode() in response.content
        first = f"{(page - 1) * 200:06d}"
        assert f"/archives/{zarr_id}/tree/big/{first}".encode() in response.content
