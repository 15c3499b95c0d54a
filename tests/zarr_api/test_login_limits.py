"""Logins are limited: the admin's login locks an account at an address after
DANDIZARR_LOGIN_FAILURE_LIMIT failures from that address, 429 while locked (django-axes), and
nowhere else; API tokens that do not exist are limited per address (429), a valid token is
never refused for its address's count."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token


def _login(client: Client, username: str, password: str) -> Any:
    return client.post("/admin/login/", {"username": username, "password": password})


def test_failures_lock_the_account_from_that_address_only(
    transactional_db: None, settings: Any
) -> None:
    """Issue #47: five wrong passwords for ``admin`` from a stranger's address locked the admin
    out from every address; now only the pair (admin, that address) is locked."""
    User.objects.create_superuser("admin", password="right-password")
    stranger = Client(REMOTE_ADDR="198.51.100.1")
    answers = [
        _login(stranger, "admin", "wrong").status_code for _ in range(settings.AXES_FAILURE_LIMIT)
    ]
    assert answers == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]  # the last locks it
    # The pair stays locked, the right password included.
    assert _login(stranger, "admin", "right-password").status_code == 429
    assert "_auth_user_id" not in stranger.session
    # The admin, from its own address, logs in.
    admin = Client(REMOTE_ADDR="198.51.100.2")
    assert _login(admin, "admin", "right-password").status_code == 302
    assert admin.session["_auth_user_id"]


def test_failures_for_other_accounts_do_not_lock_a_neighbour_out(
    transactional_db: None, settings: Any
) -> None:
    """Everyone behind one NAT shares an address: a neighbour's guesses at other accounts do
    not lock an account out from there."""
    User.objects.create_superuser("boss", password="right-password")
    shared = "203.0.113.9"
    for n in range(settings.AXES_FAILURE_LIMIT + 2):
        assert _login(Client(REMOTE_ADDR=shared), f"guess{n}", "wrong").status_code == 200
    assert _login(Client(REMOTE_ADDR=shared), "boss", "right-password").status_code == 302


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


def test_a_valid_token_is_taken_from_an_address_over_the_invalid_token_rate(
    transactional_db: None, settings: Any
) -> None:
    """Issue #47: past 30 invalid tokens from an address, valid ones from it were refused too
    (everyone behind one NAT); now only invalid ones are."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "token_failures": "30/min",  # the default, as the issue measured it
        },
    }
    owner = User.objects.create_user("owner")
    token = Token.objects.create(user=owner).key
    address = Client(REMOTE_ADDR="192.0.2.50")
    answers = [
        address.get("/api/auth/token", HTTP_AUTHORIZATION=f"token guess{n}").status_code
        for n in range(35)
    ]
    assert answers == [401] * 30 + [429] * 5
    for url in ("/api/auth/token", "/"):  # a DRF view, and a plain page through the middleware
        accepted = address.get(url, HTTP_AUTHORIZATION=f"token {token}")
        assert accepted.status_code == 200, (url, accepted.status_code)
    assert address.get("/api/auth/token", HTTP_AUTHORIZATION=f"token {token}").json() == token
    # Invalid tokens from that address are still refused, and say when to come back.
    refused = address.get("/api/info/", HTTP_AUTHORIZATION="token another")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert set(refused.json()) == {"detail", "code"} and refused.json()["code"] == "throttled"
