"""The admin works out of the box, in a real browser (issue #16, finding 6).

``bootstrap_admin`` (run by ``dandizarr serve`` on every start) gives the first admin a password
(kept 0600 in the data directory, whose path it prints). Headless Chromium (Debian's ``chromium``
and ``chromium-driver``, driven by Selenium) logs in with it and runs the archive actions "Cancel
stuck upload" and "Recompute checksum"; the outcome is checked in the database and the API.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support.api import Actor, storage_listing, upload
from tests.support.ci import skip_here_fail_in_ci
from tests.support.tree_check import assert_tree_matches_storage

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        reason = (
            "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
        skip_here_fail_in_ci(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(10)
    try:
        yield driver
    finally:
        driver.quit()


def first_admin_password(data_dir: Path) -> str:
    out = StringIO()
    call_command("bootstrap_admin", stdout=out)
    password_file = data_dir / "admin-password"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    password = password_file.read_text().strip()
    assert password not in out.getvalue()  # never printed: where it is
    assert str(password_file) in out.getvalue()
    return password


def run_action(driver: Any, url: str, archive: ZarrArchive, action: str) -> str:
    """Select the archive in the admin's list, run ``action``; the messages shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(f"{url}/admin/zarr_api/zarrarchive/")
    driver.find_element(
        By.CSS_SELECTOR, f'input[name="_selected_action"][value="{archive.pk}"]'
    ).click()
    Select(driver.find_element(By.NAME, "action")).select_by_value(action)
    driver.find_element(By.CSS_SELECTOR, 'button[name="index"]').click()
    # The click returns before the answer has loaded: wait for its messages.
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "ul.messagelist li"))
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, "ul.messagelist li"))


def test_admin_logs_in_and_runs_the_archive_actions(
    browser: Any, live_server: Any, owner: Actor, zarr_id: str, settings: Any, tmp_path: Path
) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings.DATA_DIR = tmp_path
    password = first_admin_password(tmp_path)
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, 'input[type="submit"]').click()
    # The click returns before the next page has loaded: wait for it (or fail naming the page).
    try:
        WebDriverWait(browser, 30).until(lambda driver: "Site administration" in driver.title)
    except TimeoutException:
        raise AssertionError(browser.page_source[:500]) from None

    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    assert upload(owner.client, zarr_id, {"a/1": b"one"}).status_code == 200
    upload(owner.client, zarr_id, {"a/2": b"two"}, complete=False)  # a stuck upload
    shown = run_action(browser, live_server.url, archive, "cancel_stuck_upload")
    assert "open batch cancelled" in shown, shown
    assert not Batch.objects.filter(archive=archive, state="open").exists()
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    assert sorted(storage_listing(zarr_id)) == ["a/1"]

    # Drift: a file storage holds that the tree does not.
    get_store().put(f"zarr/{zarr_id}/a/3", b"three")
    shown = run_action(browser, live_server.url, archive, "recompute_checksum")
    assert "drift repaired" in shown, shown
    detail = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert detail["file_count"] == 2
    assert_tree_matches_storage(zarr_id)
