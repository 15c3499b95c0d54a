"""Logins are limited: the admin's login locks an account after DANDIZARR_LOGIN_FAILURE_LIMIT
failures (from any address) and an address after as many (for any account), 429 while locked
(django-axes); API tokens that do not exist are limited per address (429)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client


def _login(client: Client, username: str, password: str) -> Any:
    return client.post("/admin/login/", {"username": username, "password": password})


def test_an_account_is_locked_after_failures_from_anywhere(
    transactional_db: None, settings: Any
) -> None:
    User.objects.create_superuser("boss", password="right-password")
    answers = [
        _login(Client(REMOTE_ADDR=f"198.51.100.{n + 1}"), "boss", "wrong").status_code
        for n in range(settings.AXES_FAILURE_LIMIT)  # a different address each time
    ]
    assert answers == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]  # the last locks it
    locked = _login(Client(REMOTE_ADDR="198.51.100.99"), "boss", "right-password")
    assert locked.status_code == 429
    assert "_auth_user_id" not in Client().session


def test_an_address_is_locked_after_failures_for_any_account(
    transactional_db: None, settings: Any
) -> None:
    User.objects.create_superuser("boss", password="right-password")
    client = Client(REMOTE_ADDR="203.0.113.9")
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, f"guess{n}", "wrong").status_code == 200
    assert _login(client, "guess", "wrong").status_code == 429
    assert _login(client, "boss", "right-password").status_code == 429
    # Another address still logs in.
    other = _login(Client(REMOTE_ADDR="203.0.113.10"), "boss", "right-password")
    assert other.status_code == 302


def test_invalid_tokens_are_limited_per_address(transactional_db: None, settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "token_failures": "3/min",
        },
    }
    attacker = Client(REMOTE_ADDR="192.0.2.1")
    answers = [
        attacker.get("/api/auth/token", HTTP_AUTHORIZATION=f"token guess{n}").status_code
        for n in range(5)
    ]
    assert answers == [401, 401, 401, 429, 429]
    limited = attacker.get("/api/info/", HTTP_AUTHORIZATION="token another")
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
    # Others are not affected.
    assert (
        Client(REMOTE_ADDR="192.0.2.2")
        .get("/api/auth/token", HTTP_AUTHORIZATION="token x")
        .status_code
        == 401
    )
