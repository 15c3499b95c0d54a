"""The server's listing merged with the local one (both in path order): which local files it
holds and with what size and md5, which files only it holds, and a listing out of order is a
clear error instead of a wrong match."""

from __future__ import annotations

import hashlib

import pytest

from dandizarr.client import ClientError, remote_listing
from dandizarr.client.models import RemoteFile
from dandizarr.client.remote_listing import RemoteListing

# Path order: "a-b" < "a/x" < "a0" (what is below "a" sorts where "a/" does).
LOCAL = ["a!", "a-b", "a/x", "a/y", "a0", "é"]


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def remote(*paths: str) -> list[RemoteFile]:
    return [RemoteFile(p, len(p), md5(p)) for p in paths]


@pytest.mark.parametrize("write_every", [1, 2, 1 << 16])
def test_held_files_their_states_and_the_files_only_the_server_holds(
    monkeypatch: pytest.MonkeyPatch, write_every: int
) -> None:
    monkeypatch.setattr(remote_listing, "_WRITE_EVERY", write_every)  # records written in runs
    server = remote("a", "a-b", "a/w", "a/y", "a0", "b/c", "é", "ü")
    listing = RemoteListing(LOCAL, len(LOCAL), server)
    try:
        assert [listing.holds(i) for i in range(len(LOCAL))] == [
            False,
            True,
            False,
            True,
            True,
            True,
        ]
        assert [listing.state(i) for i in range(len(LOCAL))] == [
            None if p in ("a!", "a/x") else (len(p), md5(p)) for p in LOCAL
        ]
        assert list(listing.only_entries()) == [
            (p, len(p), md5(p)) for p in ("a", "a/w", "b/c", "ü")
        ]
        assert len(listing) == len(server)
    finally:
        listing.close()


def test_an_empty_archive_holds_nothing() -> None:
    listing = RemoteListing(LOCAL, len(LOCAL), [])
    try:
        assert not any(listing.holds(i) for i in range(len(LOCAL))) and len(listing) == 0
        assert listing.state(0) is None and list(listing.only_entries()) == []
    finally:
        listing.close()


def test_nothing_local_leaves_every_server_file_only_on_the_server() -> None:
    listing = RemoteListing([], 0, remote("x", "y/z"))
    try:
        assert [p for p, _, _ in listing.only_entries()] == ["x", "y/z"]
    finally:
        listing.close()


@pytest.mark.parametrize("paths", [("a/x", "a-b"), ("a0", "a0")])
def test_a_listing_out_of_path_order_is_a_clear_error(paths: tuple[str, str]) -> None:
    with pytest.raises(ClientError, match="not in path order"):
        RemoteListing(LOCAL, len(LOCAL), remote(*paths))
