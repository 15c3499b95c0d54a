"""Neuroglancer served by the service itself, in a real browser with WebGL (headless Chromium,
SwiftShader): an OME-Zarr pyramid written by ome-zarr (NGFF 0.4, Zarr v2), an NGFF 0.5 image
with sharding_indexed levels in a packed archive, and a plain 3-D array, each uploaded by the
client and opened from its archive page's "Open in Neuroglancer" link. The viewer loads from
our origin only, no layer reports an error, the status bar stays empty (no "Disconnected from
Python server"), chunk requests reach /zarr/ and succeed (the service's own request counts),
and the picture is the data's. Screenshots are saved and their paths printed.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pytest
import requests
from PIL import Image

from dandizarr.client import DandizarrClient
from dandizarr.ome import DOCUMENT_NAMES
from tests.support.browser import SCREENSHOT_DIR, chromium, wait_until
from tests.support.ome_files import ngff_v3_sharded, ome_zarr_v2, plain_3d
from tests.support.processes import Processes

LAYERS = """
return window.viewer.layerManager.managedLayers.map((managed) => {
  const layer = managed.layer;
  if (!layer) return [managed.name, ["no layer"]];
  return [managed.name, layer.dataSources.map((source) => {
    const state = source.loadState;
    if (state === undefined) return "loading";
    if (state.error !== undefined) return "error: " + (state.error.message || state.error);
    return "loaded";
  })];
});
"""
_COUNT = re.compile(
    r"^django_http_responses_total_by_status_view_method_total\{([^}]*)\} ([0-9.e+]+)$", re.M
)


@pytest.fixture
def webgl_browser(processes: Processes, tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium with software WebGL (processes: it runs as processes)."""
    yield from chromium(tmp_path, webgl=True)


def write(files: dict[str, bytes], root: Path) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return root


def zarr_reads(url: str) -> dict[str, float]:
    """The service's count of /zarr/ answers by status (its Prometheus metrics)."""
    counts: dict[str, float] = {}
    for labels, value in _COUNT.findall(requests.get(url + "/metrics", timeout=10).text):
        if 'view="zarr-read"' in labels:
            status = re.search(r'status="(\d+)"', labels)
            assert status is not None
            counts[status.group(1)] = counts.get(status.group(1), 0) + float(value)
    return counts


def metadata_files(files: dict[str, bytes]) -> int:
    return sum(1 for name in files if name.rsplit("/", 1)[-1] in DOCUMENT_NAMES)


def open_and_check(
    browser: Any, url: str, zarr_id: str, files: dict[str, bytes], shot: str, *, ome: bool = True
) -> np.ndarray:
    from selenium.webdriver.common.by import By

    browser.get(f"{url}/archives/{zarr_id}/")
    if ome:  # what the person sees before clicking: the image, valid
        section = browser.find_element(By.ID, "ome").text
        assert "Valid OME-NGFF" in section and "micrometer" in section, section
        assert "DAPI" in section and "GFP" in section
    links = browser.find_elements(By.LINK_TEXT, "Open in Neuroglancer")
    before = zarr_reads(url)
    links[0].click()
    assert urlparse(browser.current_url).path == "/neuroglancer/v/dandizarr/"
    assert browser.execute_script("return !!document.createElement('canvas').getContext('webgl2')")
    layers = wait_until(
        lambda: (
            (state := browser.execute_script(LAYERS))
            and all(s != "loading" for _name, sources in state for s in sources)
            and state
        ),
        "the layers' sources",
        timeout=60,
    )
    assert all(s == "loaded" for _name, sources in layers for s in sources), layers
    # Chunks read: more successful /zarr/ reads than the archive has metadata files (the
    # most a viewer reads before its first chunk), and at least four chunks.
    wait_until(
        lambda: (
            sum(zarr_reads(url).get(s, 0) - before.get(s, 0) for s in ("200", "206"))
            >= metadata_files(files) + 4
        ),
        "chunk reads through /zarr/",
        timeout=60,
    )
    after = zarr_reads(url)
    failed = {s: after[s] - before.get(s, 0) for s in after if s[0] in "45" and s != "404"}
    assert not any(failed.values()), failed
    status = browser.execute_script(
        "return Array.from(document.querySelectorAll('.neuroglancer-status')).map(e => e.innerText)"
    )
    assert not any("Python" in s or "rror" in s for s in status), status
    entries = browser.get_log("browser")
    problems = [
        e["message"]
        for e in entries
        if e["level"] == "SEVERE"
        and not re.search(r"/\.zarray - Failed to load resource: .* 404", e["message"])
    ]
    assert problems == [], problems
    assert not any("Content Security Policy" in e["message"] for e in entries)
    # Every request the page made went to our origin.
    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)"
    )
    assert set(origins) <= {url}, origins
    time.sleep(3)  # the last chunks drawn
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / shot
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB"))


def test_neuroglancer_opens_ome_and_plain_arrays_from_the_service(
    processes: Processes, tmp_path: Path, webgl_browser: Any
) -> None:
    with (
        processes.serve(tmp_path / "var") as (url, token),
        DandizarrClient(url, token, jobs=4) as client,
    ):
        dandiset = client.create_dandiset("lab")["identifier"]
        v2_files, v3_files, plain_files = (
            ome_zarr_v2(tmp_path),
            ngff_v3_sharded(tmp_path),
            plain_3d(tmp_path),
        )
        v2 = client.upload(write(v2_files, tmp_path / "cells.zarr"), dandiset=dandiset)
        v3 = client.upload(
            write(v3_files, tmp_path / "tissue.zarr"),
            dandiset=dandiset,
            pack=True,
            shard_target_bytes=64 << 10,
        )
        plain = client.upload(write(plain_files, tmp_path / "raw.zarr"), dandiset=dandiset)
        assert v2.ok and v3.ok and plain.ok
        assert requests.get(f"{url}/api/zarr/{v3.zarr_id}/", timeout=10).json()["shard_count"] >= 1

        # The v2 pyramid: DAPI blue, GFP green, added; the disc of each channel shows.
        pixels = open_and_check(webgl_browser, url, v2.zarr_id, v2_files, "neuroglancer-ome-v2.png")
        assert (pixels[..., 1] > 150).sum() > 500 and (pixels[..., 2] > 150).sum() > 500
        pixels = open_and_check(
            webgl_browser, url, v3.zarr_id, v3_files, "neuroglancer-ome-v3-sharded.png"
        )
        assert (pixels[..., 1] > 150).sum() > 500
        pixels = open_and_check(
            webgl_browser, url, plain.zarr_id, plain_files, "neuroglancer-plain-3d.png", ome=False
        )
        grey = (np.abs(pixels[..., 0].astype(int) - pixels[..., 1]) < 8) & (pixels[..., 0] > 100)
        assert grey.sum() > 500
