"""OME-Zarr on the archive page and at /api/zarr/{id}/ome/: an NGFF 0.4 image written by
ome-zarr (loose) and an NGFF 0.5 sharded image written by zarr-python 3 (packed archive),
uploaded through the service onto moto's S3 (tests/support/pages.py ``create``)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client

from dandizarr_server.zarr_api.pages import archive_scan
from tests.support.api import Actor
from tests.support.ome_files import ngff_v3_sharded, ome_zarr_v2, plain_3d
from tests.support.pages import create, png_pixels

TIMES = "\u00d7"


@pytest.fixture
def anonymous() -> Client:
    return Client()


def fragment_state(link: str) -> dict[str, Any]:
    assert link.startswith("/neuroglancer/v/dandizarr/#!")
    return json.loads(urllib.parse.unquote(link.split("#!", 1)[1]))


def test_ome_zarr_v2_image_page_and_summary(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client, tmp_path: Path
) -> None:
    zarr_id = create(owner, dandiset, "cells.ome.zarr", ome_zarr_v2(tmp_path))
    page = anonymous.get(f"/archives/{zarr_id}/").content.decode()
    assert "OME-Zarr images" in page and "OME-NGFF 0.4" in page and "“cells”" in page
    # Levels with shape, chunks, scale and translation; axes with units; voxel size; channels.
    assert (
        f"2 {TIMES} 8 {TIMES} 96 {TIMES} 128" in page
        and f"1 {TIMES} 4 {TIMES} 32 {TIMES} 32" in page
    )
    assert "<code>s2</code>" in page and "1.0, 2.0, 2.0, 2.0" in page
    assert "<code>z</code> (space, micrometer)" in page and "<code>c</code> (channel)" in page
    assert f"z 2.0 micrometer {TIMES} y 0.5 micrometer" in page
    assert "DAPI (window 0.0\u20131500.0)" in page and 'fill="#00FF00"' in page
    assert "<code>labels/nuclei</code>" in page and "label image" in page
    assert "<strong>Valid</strong> OME-NGFF (v04.image.Image, ome-zarr-models)" in page
    # Levels are not listed again as plain arrays; the image has one preview and one link.
    assert "None: every array is a level of an image above." in page
    assert f"/archives/{zarr_id}/preview.png?array=&amp;v=" in page
    assert page.count("Open in Neuroglancer") == 2  # the image and its label image

    summary = anonymous.get(f"/api/zarr/{zarr_id}/ome/")
    assert summary.status_code == 200 and summary["Content-Type"] == "application/json"
    data = summary.json()
    assert data["is_ome"] and not data["truncated"]
    image = data["images"][0]
    assert [lv["path"] for lv in image["levels"]] == ["s0", "s1", "s2"]
    assert image["levels"][0]["dtype"] == "uint16"
    assert image["voxel_size"] == [
        {"axis": "z", "size": 2.0, "unit": "micrometer"},
        {"axis": "y", "size": 0.5, "unit": "micrometer"},
        {"axis": "x", "size": 0.5, "unit": "micrometer"},
    ]
    assert [c["label"] for c in image["channels"]] == ["DAPI", "GFP"]
    assert all(v["valid"] for v in data["validation"])
    state = fragment_state(image["neuroglancer_url"])
    assert state["layers"][0]["source"] == f"zarr2://http://testserver/zarr/{zarr_id}/"
    assert state["dimensions"]["x"] == [5e-7, "m"] and state["position"] == [4.0, 48.0, 64.0]

    # The preview: the channels in blue and green, within their windows.
    png = anonymous.get(f"/archives/{zarr_id}/preview.png?array=")
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    pixels = png_pixels(png.content)
    assert pixels.ndim == 3 and pixels.shape[2] == 3
    assert pixels[..., 2].max() == 255 and pixels[..., 1].max() == 255 and pixels[..., 0].max() == 0


# The preview of a packed archive reads its shard rows in the render pool's threads.
@pytest.mark.django_db(transaction=True)
def test_ngff_v3_sharded_packed_archive(
    owner: Actor,
    dandiset: str,
    s3_storage: str,
    anonymous: Client,
    tmp_path: Path,
    settings: Any,
) -> None:
    files = {**ngff_v3_sharded(tmp_path), **{f"raw/{k}": v for k, v in plain_3d(tmp_path).items()}}
    zarr_id = create(owner, dandiset, "tissue.zarr", files)
    settings.DANDIZARR_SHARD_TARGET_BYTES = 64 << 10
    assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["shard_count"] >= 1
    page = anonymous.get(f"/archives/{zarr_id}/").content.decode()
    assert "OME-NGFF 0.5" in page and "Zarr v3" in page and "v05.image.Image" in page
    assert f"(shards; chunks 1 {TIMES} 1 {TIMES} 32 {TIMES} 32)" in page
    # The plain array keeps today's description, and gets its own viewer link.
    assert "Other arrays" in page and "raw/volume" in page and "float32" in page
    assert page.count("Open in Neuroglancer") == 2
    data = anonymous.get(f"/api/zarr/{zarr_id}/ome/").json()
    (image,) = data["images"]
    assert image["path"] == "image" and image["levels"][0]["inner_chunks"] == [1, 1, 32, 32]
    state = fragment_state(image["neuroglancer_url"])
    assert {layer["source"] for layer in state["layers"]} == {
        f"zarr3://http://testserver/zarr/{zarr_id}/image/"
    }
    png = anonymous.get(f"/archives/{zarr_id}/preview.png?array=image")
    assert png.status_code == 200
    pixels = png_pixels(png.content)
    assert pixels.shape[:2] == (512, 384) and pixels[..., 1].max() == 255


def test_ome_summary_follows_the_permission_rule(
    owner: Actor, stranger: Actor, s3_storage: str, anonymous: Client, tmp_path: Path
) -> None:
    created = owner.client.post("/api/dandisets/?embargo=true", {"name": "e"}, format="json")
    zarr_id = create(owner, created.json()["identifier"], "secret.zarr", ome_zarr_v2(tmp_path))
    assert owner.client.get(f"/api/zarr/{zarr_id}/ome/").status_code == 200
    for client in (anonymous, stranger.client):
        response = client.get(f"/api/zarr/{zarr_id}/ome/")
        assert response.status_code == 404 and "detail" in response.json()
        assert b"cells" not in response.content
    assert anonymous.get("/api/zarr/not-a-uuid/ome/").status_code == 404
    assert anonymous.post(f"/api/zarr/{zarr_id}/ome/").status_code == 405


def test_plain_archive_has_no_ome_and_v2_dtypes_read_as_names(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client
) -> None:
    zarray = {
        "zarr_format": 2, "shape": [4, 4], "chunks": [4, 4], "dtype": ">u2",
        "compressor": None, "fill_value": 0, "filters": None, "order": "C",
    }  # fmt: skip
    structured = {**zarray, "dtype": [["a", "<i4"], ["b", "<f8"]], "fill_value": None}
    files = {
        ".zgroup": b'{"zarr_format": 2}',
        "be/.zarray": json.dumps(zarray).encode(),
        "be/0.0": np.arange(16, dtype=">u2").tobytes(),
        "rec/.zarray": json.dumps(structured).encode(),
        "obj/.zarray": json.dumps(
            {**zarray, "dtype": "|O", "filters": [{"id": "vlen-utf8"}]}
        ).encode(),
    }
    zarr_id = create(owner, dandiset, "plain.zarr", files)
    page = anonymous.get(f"/archives/{zarr_id}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "OME-Zarr images" not in text
    assert "<code>uint16, big-endian</code>" in text
    assert "<code>struct {a: int32, b: float64}</code>" in text and "<code>object</code>" in text
    data = anonymous.get(f"/api/zarr/{zarr_id}/ome/").json()
    assert data == {
        "is_ome": False,
        "images": [],
        "collections": [],
        "validation": [],
        "truncated": False,
    }


def test_an_image_too_large_to_draw_has_no_picture_and_reads_no_chunk(
    owner: Actor, dandiset: str, s3_storage: str, anonymous: Client
) -> None:
    """Hand-written NGFF 0.5 metadata of a 50,000 x 50,000 plane in one chunk (no chunk
    uploaded): the preview's budget refuses every level from the metadata alone."""
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    ome = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": axes,
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
                ],
            }
        ],
    }
    level = {
        "zarr_format": 3, "node_type": "array", "shape": [50000, 50000], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [50000, 50000]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {}, "dimension_names": ["y", "x"],
    }  # fmt: skip
    files = {
        "zarr.json": json.dumps(
            {"zarr_format": 3, "node_type": "group", "attributes": {"ome": ome}}
        ).encode(),
        "0/zarr.json": json.dumps(level).encode(),
    }
    zarr_id = create(owner, dandiset, "huge.zarr", files)
    page = anonymous.get(f"/archives/{zarr_id}/").content.decode()
    assert "No preview: its middle plane" in page and "more than a preview reads" in page
    png = anonymous.get(f"/archives/{zarr_id}/preview.png?array=")
    assert png.status_code == 404 and b"more than a preview reads" in png.content
    # Still described, validated and viewable.
    assert "<strong>Valid</strong>" in page and "Open in Neuroglancer" in page


def test_the_scan_stops_at_its_metadata_budget(
    owner: Actor,
    dandiset: str,
    s3_storage: str,
    anonymous: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = ome_zarr_v2(tmp_path)
    zarr_id = create(owner, dandiset, "budget.zarr", files)
    # Less than the root's .zgroup and .zattrs: the image is not reached, and it says so.
    monkeypatch.setattr(archive_scan, "MAX_SCAN_BYTES", len(files[".zattrs"]) // 2)
    data = anonymous.get(f"/api/zarr/{zarr_id}/ome/").json()
    assert data["truncated"] and not data["is_ome"]
