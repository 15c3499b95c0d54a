"""A person's first minutes, in a real browser (headless Chromium driven by selenium) against
``dandizarr serve``: the home page, an archive uploaded by the client, two directories down
its tree, the preview picture, a downloaded file's md5. The browser's console must hold no
error and no request may leave the machine. Screenshots are saved and their paths printed.

Needs Debian's ``chromium`` and ``chromium-driver`` (.ci/run installs them): skipped (with the
reason shown by -ra) when missing on a developer's machine, failed under CI=true.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import requests
import zarr
from PIL import Image

from dandizarr.client import DandizarrClient
from tests.support.browser import LOCAL_HOSTS, SCREENSHOT_DIR, wait_until
from tests.support.processes import serve_process


def scan(root: Path) -> np.ndarray:
    """A Zarr v3 archive as a microscope might leave it: a 3-D image and a small table."""
    z, h, w = 5, 150, 200
    y, x = np.mgrid[0:h, 0:w]
    disc = ((y - 70) ** 2 + (x - 80) ** 2 < 45**2) * 900
    data = np.stack([x * 4 + y * 2 + disc + 50 * i for i in range(z)]).astype("uint16")
    store = zarr.storage.LocalStore(root)
    image = zarr.create_array(
        store, name="image", shape=data.shape, chunks=(1, 64, 64), dtype="uint16",
        compressors=zarr.codecs.ZstdCodec(level=3),
    )  # fmt: skip
    image[...] = data
    zarr.create_array(store, name="labels", shape=(3,), chunks=(3,), dtype="int8")[...] = 1
    return data


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob") or parsed.hostname in LOCAL_HOSTS


def test_a_person_finds_browses_sees_and_downloads_an_archive(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    root = tmp_path / "scan.zarr"
    scan(root)
    with (
        serve_process(tmp_path / "var") as (url, token),
        DandizarrClient(url, token, jobs=4) as client,
    ):
        dandiset = client.create_dandiset("lab")["identifier"]
        result = client.upload(root, dandiset=dandiset)
        assert result.ok, result.to_json()

        browser.get(url + "/")
        assert f"export DANDIZARR_URL={url}" in browser.page_source
        browser.save_screenshot(str(SCREENSHOT_DIR / "home-page.png"))
        browser.find_element(By.LINK_TEXT, "scan.zarr").click()
        assert urlparse(browser.current_url).path == f"/archives/{result.zarr_id}/"
        assert result.server_checksum in browser.find_element(By.ID, "checksum").text

        # The preview: a PNG of the middle plane, 512 x 384, not blank.
        image = browser.find_element(By.CSS_SELECTOR, "figure.preview img")
        size = wait_until(
            lambda: browser.execute_script(
                "const i = arguments[0]; return i.complete && i.naturalWidth"
                " ? [i.naturalWidth, i.naturalHeight] : null;",
                image,
            ),
            "the preview image",
        )
        assert size == [512, 384]
        png = requests.get(image.get_attribute("src"), timeout=10)
        assert png.headers["Content-Type"] == "image/png" and png.content[:4] == b"\x89PNG"
        pixels = np.asarray(Image.open(io.BytesIO(png.content)))
        assert pixels.shape == (384, 512) and pixels.min() == 0 and pixels.max() == 255
        assert len(np.unique(pixels)) > 50  # a picture, not a blank or a flat fill
        browser.save_screenshot(str(SCREENSHOT_DIR / "archive-page.png"))

        # Two directories down, then on to a chunk, and download it.
        for name in ["image/", "c/", "2/", "1/"]:
            browser.find_element(By.LINK_TEXT, name).click()
        assert urlparse(browser.current_url).path.endswith("/tree/image/c/2/1")
        browser.save_screenshot(str(SCREENSHOT_DIR / "tree-page.png"))
        link = browser.find_element(By.CSS_SELECTOR, 'a.download[download="1"]')
        link.click()
        target = browser.downloads / "1"
        wait_until(lambda: target.exists() and not list(browser.downloads.glob("*.crdownload")),
                   "the download")  # fmt: skip
        expected = (root / "image/c/2/1/1").read_bytes()
        assert hashlib.md5(target.read_bytes()).hexdigest() == hashlib.md5(expected).hexdigest()

        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        requested = [
            json.loads(entry["message"])["message"]["params"].get("request", {}).get("url", "")
            for entry in browser.get_log("performance")
            if '"Network.requestWillBeSent"' in entry["message"]
        ]
        assert len(requested) >= 6, requested
        elsewhere = [u for u in requested if not is_local(u)]
        assert not elsewhere, elsewhere
    print(f"screenshots in {SCREENSHOT_DIR}")
