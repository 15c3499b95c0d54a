"""Headless Chromium for the browser tests (Debian's chromium and chromium-driver).

Skipped (with the reason shown by -ra) when missing on a developer's machine, failed under
CI=true, where .ci/run installs them."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.ci import skip_here_fail_in_ci

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOT_DIR = Path(
    os.environ.get("DANDIZARR_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="dandizarr-shots-")
)
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def _need_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    message = (
        "the browser test needs Debian's chromium and chromium-driver "
        "(apt-get install -y chromium chromium-driver); .ci/run installs them"
    )
    skip_here_fail_in_ci(message)


# WebGL without a GPU: ANGLE over SwiftShader, Chromium's software renderer (Neuroglancer needs
# WebGL 2; headless Chromium refuses SwiftShader's WebGL unless told it is wanted).
SOFTWARE_WEBGL = [
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--ignore-gpu-blocklist",
]


def chromium(tmp_path: Path, *, webgl: bool = False) -> Iterator[Any]:
    """A headless Chromium driven by selenium, downloading into ``tmp_path/downloads``;
    ``webgl``: with software WebGL (SwiftShader) instead of no GPU at all."""
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in [
        "--headless=new",
        "--no-sandbox",  # root in CI
        *(SOFTWARE_WEBGL if webgl else ["--disable-gpu"]),
        "--disable-dev-shm-usage",
        "--window-size=1200,1500",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
    ]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(condition: Any, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
