"""``GET /api/zarr/{zarr_id}/diff/?to=`` (issue #49, diffs): the files added, modified and
deleted between any two states (a version and the draft, two versions, two archives), exact,
a page at a time through ``next``; what a requester may not read is absent; bad queries are
400s that name no value."""

from __future__ import annotations

from typing import Any

from django.test import Client

from dandizarr_server.zarr_api.pages import views
from dandizarr_server.zarr_api.runtime import kept_documents
from dandizarr_server.zarr_api.selectors import tree_diffs
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, upload
from tests.support.versions import add_asset, publish, versions

BEFORE = {"a/x": b"x one", "a/y": b"y one", "keep": b"kept", "a/b/deep": b"deep", "f": b"file"}
AFTER = {"a/x": b"x two!", "keep": b"kept", "a/b/deep": b"deep", "a/z": b"z", "f/now": b"dir"}


def diff(actor: Actor, zarr_id: str, to: str, **query: Any) -> Any:
    return actor.client.get(f"/api/zarr/{zarr_id}/diff/", {"to": to, **query})


def draft_like(owner: Actor, dandiset: str, name: str, files: dict[str, bytes]) -> str:
    zarr_id = create_archive(owner, dandiset, name, layout="loose")
    assert upload(owner.client, zarr_id, files).status_code == 200
    return zarr_id


def test_a_diff_names_every_change_exactly_and_pages(
    owner: Actor, stranger: Actor, dandiset: str, s3_storage: str, monkeypatch: Any
) -> None:
    ensure_storage_versioning()
    zarr_id = draft_like(owner, dandiset, "d.zarr", BEFORE)
    add_asset(owner, dandiset, zarr_id, "d.zarr")
    publish(owner, dandiset)
    version_id = versions(owner, zarr_id)[0]["zarr_id"]
    response = owner.client.delete(
        f"/api/zarr/{zarr_id}/files/", [{"path": p} for p in ("a/y", "f")], format="json"
    )
    assert response.status_code == 204
    changed = {k: AFTER[k] for k in ("a/x", "a/z", "f/now")}
    assert upload(owner.client, zarr_id, changed).status_code == 200

    answer = diff(owner, version_id, zarr_id)
    assert answer.status_code == 200, answer.content
    whole = answer.json()
    assert whole["from"] == version_id and whole["to"] == zarr_id
    assert whole["added"] == ["a/z", "f/now"]
    assert whole["modified"] == ["a/x"]
    assert whole["deleted"] == ["a/y", "f"]
    assert whole["bytes_added"] == len(b"x two!") + len(b"z") + len(b"dir")
    assert whole["bytes_deleted"] == len(b"x one") + len(b"y one") + len(b"file")
    assert whole["next"] is None
    # The other way round, and between two archives with the same files: the same changes.
    back = diff(owner, zarr_id, version_id).json()
    assert (back["added"], back["deleted"]) == (whole["deleted"], whole["added"])
    twin = draft_like(owner, dandiset, "twin.zarr", AFTER)
    assert diff(owner, twin, zarr_id).json()["added"] == []
    assert diff(owner, version_id, twin).json()["added"] == whole["added"]
    # A page of one change at a time, resumed through next: the same changes in order.
    seen: list[str] = []
    url: str | None = f"/api/zarr/{version_id}/diff/?to={zarr_id}&limit=1"
    while url:
        page = owner.client.get(url).json()
        seen += page["added"] + page["modified"] + page["deleted"]
        url = page["next"]
    assert seen == ["a/x", "a/y", "a/z", "f", "f/now"]

    # The next version's page shows what changed since the one before.
    publish(owner, dandiset)
    second = versions(owner, zarr_id)[1]["zarr_id"]
    page = owner.client.get(f"/archives/{second}/").content.decode()
    assert "Changes since version 1" in page
    shown = page.split('<pre class="changes">', 1)[1].split("</pre>", 1)[0].splitlines()
    assert shown == ["~ a/x", "- a/y", "+ a/z", "- f", "+ f/now"]
    assert '<p class="change-counts">2 added, 1 modified, 2 deleted.</p>' in page
    # Two versions never change: the page's changes are walked once and kept.
    kept_before = kept_documents.counts["kept"]
    assert owner.client.get(f"/archives/{second}/").content.decode() == page
    assert kept_documents.counts["kept"] == kept_before + 1
    # Bounded: the first changes listed, each kind counted among the first counted.
    monkeypatch.setattr(views, "CHANGES_SHOWN", 2)
    monkeypatch.setattr(views, "CHANGES_COUNTED", 3)
    page = owner.client.get(f"/archives/{second}/").content.decode()
    shown = page.split('<pre class="changes">', 1)[1].split("</pre>", 1)[0].splitlines()
    assert shown == ["~ a/x", "- a/y"]
    assert "1 added, 1 modified, 1 deleted, and more: these counts are of the first 3" in page
    assert "Changes since" not in owner.client.get(f"/archives/{version_id}/").content.decode()

    # Bad queries: 400 naming no value; ids no one may read here: 404.
    for query in ({"to": ""}, {"to": zarr_id, "after": "../x"}, {"to": zarr_id, "limit": "0"}):
        refused = owner.client.get(f"/api/zarr/{version_id}/diff/", query)
        assert refused.status_code == 400, (query, refused.content)
        assert refused.json()["code"] == "invalid"
        assert "../x" not in refused.json()["detail"]
    missing = "00000000-0000-4000-8000-000000000000"
    for answer in (diff(owner, version_id, missing), diff(owner, missing, zarr_id)):
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")


def test_a_private_archive_is_absent_from_a_diff(
    owner: Actor, stranger: Actor, s3_storage: str
) -> None:
    private = owner.client.post("/api/dandisets/?embargo=true", {"name": "p"}, format="json")
    identifier = private.json()["identifier"]
    secret = draft_like(owner, identifier, "s.zarr", BEFORE)
    open_dandiset = stranger.client.post("/api/dandisets/", {"name": "o"}, format="json")
    mine = draft_like(stranger, open_dandiset.json()["identifier"], "m.zarr", AFTER)
    assert diff(owner, secret, mine).status_code == 200  # the owner reads both
    for client, other in ((stranger.client, mine), (Client(), mine)):
        for frm, to in ((secret, other), (other, secret)):
            answer = client.get(f"/api/zarr/{frm}/diff/", {"to": to})
            assert answer.status_code in (401, 404), answer.content
            assert b"s.zarr" not in answer.content


def test_a_diff_reads_the_directories_that_changed_not_the_archive(
    owner: Actor, dandiset: str, s3_storage: str, monkeypatch: Any
) -> None:
    """The cost, counted not timed: the listings the route reads are those of the directories
    on the way to a change, on both sides, whatever else the archives hold."""
    files = {f"d{i:02}/f{j}": f"{i}-{j}".encode() for i in range(40) for j in range(5)}
    files |= {f"big{k}/{n:02}/x": b"x" for k in range(2) for n in range(40)}
    before = draft_like(owner, dandiset, "big.zarr", files)
    after = draft_like(owner, dandiset, "big2.zarr", {**files, "d17/f3": b"!", "big1/05/x": b"y"})
    reads: list[tuple[str, str]] = []
    walk = tree_diffs.tree_changes

    def counted(read_before: Any, read_after: Any, **options: Any) -> Any:
        def side(name: str, read: Any) -> Any:
            def counted_read(directory: str) -> Any:
                reads.append((name, directory))
                return read(directory)

            return counted_read

        return walk(side("before", read_before), side("after", read_after), **options)

    monkeypatch.setattr(tree_diffs, "tree_changes", counted)
    page = diff(owner, before, after).json()
    assert (page["added"], page["modified"], page["deleted"]) == ([], ["big1/05/x", "d17/f3"], [])
    changed = ["", "big1", "big1/05", "d17"]  # of 125 directories on each side
    assert sorted(reads) == sorted((s, d) for s in ("before", "after") for d in changed)
    # A page resumed past a path opens the directories on the way to it, no others.
    reads.clear()
    assert diff(owner, before, after, after="big1/05/x").json()["modified"] == ["d17/f3"]
    assert set(reads) <= {(s, d) for s in ("before", "after") for d in changed}
