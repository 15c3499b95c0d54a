"""The service's own pages work under their strict Content-Security-Policy (no inline script
or style): in a real browser, the home page, the admin login and the API docs (Swagger UI)
render, and the browser refuses nothing. drf-spectacular's own Swagger page carries an inline
``<style>``, which the browser blocks under ``style-src 'self'``; ours moves it to a static file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.browser import wait_until
from tests.support.processes import serve_process


def _refusals(browser: Any) -> list[str]:
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"] or "Refused to" in entry["message"]
    ]


def test_pages_render_with_nothing_refused(tmp_path: Path, browser: Any) -> None:
    with serve_process(tmp_path / "var") as (url, _admin_token):
        browser.get(url + "/api/docs/")
        operations = wait_until(
            lambda: browser.find_elements("css selector", ".swagger-ui .opblock"),
            "Swagger UI's operations",
        )
        assert len(operations) > 10
        # The page's own rules apply (they came from the inline style before).
        assert browser.execute_script("return getComputedStyle(document.body).margin") == "0px"
        browser.get(url + "/admin/login/")
        assert browser.find_elements("css selector", "input[name=username]")
        browser.get(url + "/api/info/")  # DRF's browsable API
        assert browser.find_elements("css selector", ".response-info")
        browser.get(url + "/")
        wait_until(lambda: browser.find_elements("css selector", "a[href]"), "the home page")
        assert _refusals(browser) == []
