"""An upload cannot take over the admin (issue: "an upload takes over the admin").

A user uploads ``evil.html`` and ``evil.svg`` whose script, if it ever ran on the service's
origin with the reader's session, would make its uploader a superuser through the admin and
create a dandiset through the API. A logged-in admin then opens, in a real browser (headless
Chromium), every link the pages show to those files (the tree pages, their download links,
the storage URLs the downloads go to) and the same files under ``/zarr/``. Afterwards the
uploader is still no one special, no dandiset was made, and no page ever ran the script.

Run against the service before the user-content headers (dandizarr.objectstore.user_bytes), the same
steps made the uploader a superuser.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import requests

from tests.support.browser import wait_until
from tests.support.processes import serve_process

# Promote "mallory" through the admin's own change form, then make a dandiset through the
# API with the reader's CSRF token; mark the page so the test can see the script ran.
PAYLOAD = """
(async () => {
  document.title = "PWNED";
  const list = await fetch("/admin/auth/user/?q=mallory", {credentials: "include"});
  const found = new DOMParser().parseFromString(await list.text(), "text/html");
  const link = found.querySelector('a[href*="/admin/auth/user/"][href$="/change/"]');
  const page = await fetch(link.getAttribute("href"), {credentials: "include"});
  const doc = new DOMParser().parseFromString(await page.text(), "text/html");
  const form = doc.querySelector("#user_form");
  form.querySelector("[name=is_staff]").checked = true;
  form.querySelector("[name=is_superuser]").checked = true;
  const data = new FormData(form);
  data.set("_save", "Save");
  await fetch(link.getAttribute("href"), {method: "POST", body: data, credentials: "include"});
  const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
  await fetch("/api/dandisets/", {
    method: "POST", credentials: "include",
    headers: {"X-CSRFToken": csrf, "Content-Type": "application/json"},
    body: JSON.stringify({name: "pwned"}),
  });
})();
"""
HOSTILE = {
    "evil.html": f"<!DOCTYPE html><html><body><script>{PAYLOAD}</script></body></html>",
    "pics/evil.svg": (
        '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        f"<script>{PAYLOAD}</script></svg>"
    ),
}


def _manage(data_dir: Path, code: str) -> str:
    """Run ``code`` in a Django shell on ``dandizarr serve``'s own database."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        env={**env, "DANDIZARR_DATA_DIR": str(data_dir), "DANDIZARR_EMBEDDED": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return result.stdout.strip()


def _mallory(data_dir: Path) -> dict[str, Any]:
    return json.loads(
        _manage(
            data_dir,
            "import json; from django.contrib.auth.models import User; "
            "u = User.objects.get(username='mallory'); "
            "print(json.dumps({'staff': u.is_staff, 'superuser': u.is_superuser}))",
        )
    )


def _log_in(browser: Any, url: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url + "/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: "/admin/login/" not in browser.current_url, "the admin login")


def _links(browser: Any) -> list[str]:
    return [
        urljoin(browser.current_url, a.get_attribute("href") or "")
        for a in browser.find_elements("css selector", "a[href]")
    ]


def test_an_admin_opening_hostile_uploads_changes_nothing(tmp_path: Path, browser: Any) -> None:
    data_dir = tmp_path / "var"
    with serve_process(data_dir) as (url, _admin_token):
        mallory_token = _manage(
            data_dir,
            "from django.contrib.auth.models import User; "
            "from rest_framework.authtoken.models import Token; "
            "print(Token.objects.create(user=User.objects.create_user('mallory')).key)",
        )
        api = requests.Session()
        api.headers["Authorization"] = f"Token {mallory_token}"
        dandiset = api.post(f"{url}/api/dandisets/", json={"name": "innocent"}).json()
        archive = api.post(
            f"{url}/api/zarr/", json={"name": "innocent.zarr", "dandiset": dandiset["identifier"]}
        ).json()
        zarr_id = archive["zarr_id"]
        bodies = {path: text.encode() for path, text in HOSTILE.items()}
        targets = api.post(
            f"{url}/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": hashlib.md5(b).hexdigest()} for p, b in bodies.items()],
        ).json()
        for target in targets:
            body = bodies[target["path"]]
            md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
            # The uploader's own Content-Type goes with the bytes (storage keeps it).
            kind = "image/svg+xml" if target["path"].endswith(".svg") else "text/html"
            stored = requests.put(
                target["upload_url"], data=body, headers={"Content-MD5": md5, "Content-Type": kind}
            )
            assert stored.status_code == 200, stored.text
        assert api.post(f"{url}/api/zarr/{zarr_id}/upload/complete/").status_code == 200

        _log_in(browser, url, (data_dir / "admin-password").read_text().strip())

        # Every link the pages show that leads to a hostile file, and where each leads.
        opened: list[str] = []
        pages = [f"{url}/archives/{zarr_id}/tree/", f"{url}/archives/{zarr_id}/tree/pics"]
        for page in pages:
            browser.get(page)
            for link in _links(browser):
                if "evil" in link and link not in opened:
                    opened.append(link)
        opened += [
            f"{url}/zarr/{zarr_id}/evil.html",
            f"{url}/zarr/{zarr_id}/pics/evil.svg",
            f"{url}/zarr/{zarr_id}/",
        ]
        download = requests.get(
            f"{url}/api/zarr/{zarr_id}/files/evil.html?download=true", allow_redirects=False
        )
        opened.append(download.headers["Location"])  # the storage URL itself
        kinds = {urlparse(link).path.split("/")[1] for link in opened}
        assert {"archives", "api", "zarr", "storage"} <= kinds, opened

        for link in opened:
            browser.get(link)
            # Give a script that would run the time to do its requests.
            browser.execute_script("return 1")
            assert browser.title != "PWNED", link
        # The /zarr/ listing's own links, clicked.
        browser.get(f"{url}/zarr/{zarr_id}/")
        for link in _links(browser):
            browser.get(link)
            assert browser.title != "PWNED", link

        assert _mallory(data_dir) == {"staff": False, "superuser": False}
        names = [d["name"] for d in api.get(f"{url}/api/dandisets/").json()["results"]]
        assert "pwned" not in names, names
