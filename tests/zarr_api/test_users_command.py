"""Users and tokens without a Python shell (issue #38): ``manage.py users`` adds a user, makes
them an owner of a dandiset (or not), issues and revokes their token; a token goes to a file
readable by its owner alone, on stdout only when asked. The admin does the same."""

from __future__ import annotations

import stat
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.models import Dandiset, Version


def users(*args: str) -> str:
    out = StringIO()
    call_command("users", *args, stdout=out)
    return out.getvalue().strip()


def make_dandiset(name: str = "d") -> Dandiset:
    dandiset = Dandiset.objects.create(name=name)
    Version.objects.create(dandiset=dandiset, version=Version.DRAFT)
    return dandiset


def as_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def create_archive(client: APIClient, dandiset: Dandiset) -> int:
    answer = client.post(
        "/api/zarr/", {"name": "a.zarr", "dandiset": dandiset.identifier}, format="json"
    )
    return answer.status_code


def test_add_own_issue_revoke(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    dandiset = make_dandiset()
    assert users("add", "alice", "--email", "alice@example.org") == "added user alice"
    alice = User.objects.get(username="alice")
    assert alice.email == "alice@example.org" and not alice.is_staff
    assert not alice.has_usable_password()

    printed = users("token", "issue", "alice")
    path = tmp_path / "tokens" / "alice"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = path.read_text().strip()
    assert key == Token.objects.get(user=alice).key
    assert key not in printed and str(path) in printed

    assert create_archive(as_token(key), dandiset) == 403  # not an owner yet
    owned = users("own", "alice", dandiset.identifier)
    assert owned == f"alice owns dandiset {dandiset.identifier}"
    assert create_archive(as_token(key), dandiset) == 201

    # A new token replaces the old one at once.
    elsewhere = tmp_path / "keys" / "alice.token"
    users("token", "issue", "alice", "--file", str(elsewhere))
    new_key = elsewhere.read_text().strip()
    assert new_key != key
    assert as_token(key).get("/api/info/").status_code == 401
    assert users("token", "revoke", "alice") == "revoked the token of alice"
    assert as_token(new_key).get("/api/info/").status_code == 401
    assert users("token", "revoke", "alice") == "alice had no token"

    users("disown", "alice", dandiset.identifier)
    assert not dandiset.owners.filter(pk=alice.pk).exists()


def test_print_only_when_asked(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    users("add", "bob", "--staff")
    assert User.objects.get(username="bob").is_staff
    printed = users("token", "issue", "bob", "--print")
    assert printed == Token.objects.get(user__username="bob").key
    assert not (tmp_path / "tokens").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("own", "nobody", "000001"), "no user 'nobody' (not_found)"),
        (("own", "carol", "999999"), "no dandiset '999999' (not_found)"),
        (("own", "carol", "x1"), "no dandiset 'x1' (not_found)"),
        (("add", "carol"), "user 'carol' exists (conflict)"),
        (("add", "bad name!"), "(invalid)"),
        (("token", "issue", "nobody"), "no user 'nobody' (not_found)"),
    ],
)
def test_refusals_name_what_is_wrong(db: None, args: tuple[str, ...], message: str) -> None:
    User.objects.create_user("carol")
    with pytest.raises(CommandError) as refused:
        users(*args)
    assert message in str(refused.value)
    assert User.objects.count() == 1


def test_the_admin_adds_users_owners_and_tokens(db: None) -> None:
    admin = User.objects.create_superuser("root", password="pw-for-the-admin-test")
    dandiset = make_dandiset()
    browser = Client()
    browser.force_login(admin)
    answer = browser.post(
        "/admin/auth/user/add/",
        {"username": "dave", "password1": "a-long-pass-9f3k", "password2": "a-long-pass-9f3k"},
    )
    assert answer.status_code == 302, answer.content[:2000]
    dave = User.objects.get(username="dave")
    answer = browser.post(
        f"/admin/zarr_api/dandiset/{dandiset.pk}/change/",
        {"name": dandiset.name, "embargo_status": dandiset.embargo_status, "owners": [dave.pk]},
    )
    assert answer.status_code == 302, answer.content[:2000]
    assert list(dandiset.owners.all()) == [dave]
    answer = browser.post("/admin/authtoken/tokenproxy/add/", {"user": dave.pk})
    assert answer.status_code == 302, answer.content[:2000]
    key = Token.objects.get(user=dave).key
    assert create_archive(as_token(key), dandiset) == 201
    # The token admin names a token by its user (rest_framework.authtoken.admin).
    answer = browser.post(f"/admin/authtoken/tokenproxy/{dave.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert not Token.objects.filter(user=dave).exists()


def test_an_operator_creates_a_dandiset_for_an_owner(db: None) -> None:
    """A fresh install has no dandiset for ``users own``: ``dandisets create`` makes one with
    its draft, owned by the user named, and prints its identifier."""
    users("add", "alice")
    out = StringIO()
    call_command("dandisets", "create", "Alice's data", "--owner", "alice", stdout=out)
    identifier = out.getvalue().strip()
    dandiset = Dandiset.objects.get(pk=int(identifier))
    assert dandiset.name == "Alice's data"
    assert list(dandiset.owners.values_list("username", flat=True)) == ["alice"]
    assert dandiset.embargo_status == Dandiset.EmbargoStatus.OPEN
    assert Version.objects.filter(dandiset=dandiset, version=Version.DRAFT).exists()
    out = StringIO()
    call_command("dandisets", "create", "private", "--owner", "alice", "--embargoed", stdout=out)
    embargoed = Dandiset.objects.get(pk=int(out.getvalue()))
    assert embargoed.embargo_status == Dandiset.EmbargoStatus.EMBARGOED
    with pytest.raises(CommandError):
        call_command("dandisets", "create", "x", "--owner", "nobody", stdout=StringIO())
    assert Dandiset.objects.count() == 2


def test_no_dead_token_is_left_in_the_default_file(db: None, settings: Any, tmp_path: Path) -> None:
    """A token issued elsewhere (or printed) or revoked takes the old one's file with it."""
    settings.DATA_DIR = tmp_path
    users("add", "bob")
    default = tmp_path / "tokens" / "bob"
    users("token", "issue", "bob")
    assert default.is_file()
    users("token", "issue", "bob", "--file", str(tmp_path / "elsewhere"))
    assert not default.exists() and (tmp_path / "elsewhere").is_file()
    users("token", "issue", "bob")
    users("token", "issue", "bob", "--print")
    assert not default.exists()
    users("token", "issue", "bob")
    users("token", "revoke", "bob")
    assert not default.exists()
