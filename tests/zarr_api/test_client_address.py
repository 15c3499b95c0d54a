"""Which address a per-address limit counts: the connection's, unless the deployment says a
proxy of its own is in front (DANDIZARR_TLS_PROXY), and then the last X-Forwarded-For entry
(the one that proxy appended). A client's own X-Forwarded-For never buys it a fresh count."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def low_rates(settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            "expensive_anon": "3/min",
            "expensive_user": "3/min",
            "token_failures": "3/min",
        },
    }


def _manifest(zarr_id: str, remote: str, forwarded: str) -> int:
    client = Client(REMOTE_ADDR=remote)
    url = f"/api/zarr/{zarr_id}/manifest.json"
    return client.get(url, HTTP_X_FORWARDED_FOR=forwarded).status_code


def test_a_client_cannot_forward_its_way_past_the_read_limit(zarr_id: str, low_rates: None) -> None:
    answers = [_manifest(zarr_id, "192.0.2.7", f"198.51.100.{n}") for n in range(5)]
    assert answers == [200, 200, 200, 429, 429]
    assert _manifest(zarr_id, "192.0.2.8", "198.51.100.1") == 200  # another connection


def test_behind_a_trusted_proxy_the_last_forwarded_entry_counts(
    zarr_id: str, low_rates: None, settings: Any
) -> None:
    settings.DANDIZARR_TLS_PROXY = True
    proxy = "10.0.0.1"  # every request comes through it
    # The client writes what it likes before the proxy's entry: one count all the same.
    answers = [_manifest(zarr_id, proxy, f"203.0.113.{n}, 198.51.100.5") for n in range(4)]
    assert answers == [200, 200, 200, 429]
    # Another client behind the same proxy has its own count.
    assert _manifest(zarr_id, proxy, "198.51.100.6") == 200
    # No header from the proxy: the connection's address.
    direct = Client(REMOTE_ADDR="10.0.0.2").get(f"/api/zarr/{zarr_id}/manifest.json")
    assert direct.status_code == 200


def test_invalid_tokens_count_per_real_address(transactional_db: None, low_rates: None) -> None:
    answers = [
        Client(REMOTE_ADDR="192.0.2.1")
        .get("/api/info/", HTTP_AUTHORIZATION=f"token guess{n}", HTTP_X_FORWARDED_FOR=f"10.9.9.{n}")
        .status_code
        for n in range(5)
    ]
    assert answers == [401, 401, 401, 429, 429]


def test_login_lockouts_behind_a_proxy_count_the_proxys_entry(
    transactional_db: None, settings: Any
) -> None:
    settings.DANDIZARR_TLS_PROXY = True
    User.objects.create_superuser("boss", password="right-password")
    proxy = Client(REMOTE_ADDR="10.0.0.1")

    def login(username: str, password: str, forwarded: str) -> int:
        return proxy.post(
            "/admin/login/",
            {"username": username, "password": password},
            HTTP_X_FORWARDED_FOR=forwarded,
        ).status_code

    # The client writes what it likes before the proxy's entry: one count all the same.
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login("boss", "wrong", f"203.0.113.{n}, 198.51.100.9") == 200
    assert login("boss", "wrong", "203.0.113.77, 198.51.100.9") == 429
    # The locked pair stays locked whatever the client forwards; the account from another
    # client behind the proxy logs in.
    assert login("boss", "right-password", "1.2.3.4, 198.51.100.9") == 429
    assert login("boss", "right-password", "198.51.100.10") == 302
