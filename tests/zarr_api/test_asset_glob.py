"""The assets listing's ``?glob=`` (what ``dandi download --path-type glob`` asks): the DANDI
Archive's glob over asset paths (``*`` any characters, ``/`` too), case-insensitive; a bad
pattern is a 400. And ``?path=``, a prefix as the DANDI API's (what ``dandi download`` of a
folder asks)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import Actor, create_archive, make_actor

PATHS = ["sub-1/a.zarr", "sub-1/b.zarr", "sub-2/a.zarr", "sub-2/deep/A.zarr", "x[1].zarr"]


@pytest.fixture
def listed(db: None, settings: Any, tmp_path: Any) -> tuple[Actor, str]:
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
    owner = make_actor("owner")
    response = owner.client.post("/api/dandisets/", {"name": "globs"}, format="json")
    assert response.status_code == 201, response.content
    dandiset = str(response.json()["identifier"])
    for path in PATHS:
        zarr_id = create_archive(owner, dandiset, path, layout="loose")
        added = owner.client.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            {"metadata": {"path": path}, "zarr_id": zarr_id},
            format="json",
        )
        assert added.status_code == 201, added.content
    return owner, dandiset


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("sub-*/a.zarr", ["sub-1/a.zarr", "sub-2/a.zarr", "sub-2/deep/A.zarr"]),
        ("sub-1/*.zarr", ["sub-1/a.zarr", "sub-1/b.zarr"]),
        ("*a.zarr", ["sub-1/a.zarr", "sub-2/a.zarr", "sub-2/deep/A.zarr"]),  # * crosses /
        ("sub-?/b.zarr", []),  # only * is a wildcard, as the DANDI Archive's
        ("x[1].zarr", ["x[1].zarr"]),  # a bracket is itself
        ("sub-1/a.zar", []),  # anchored at both ends
        ("SUB-2/*", ["sub-2/a.zarr", "sub-2/deep/A.zarr"]),
        ("sub.1/a.zarr", []),  # a dot is a dot
    ],
)
def test_glob_selects_asset_paths(
    listed: tuple[Actor, str], glob: str, expected: list[str]
) -> None:
    owner, dandiset = listed
    response = owner.client.get(
        f"/api/dandisets/{dandiset}/versions/draft/assets/", {"glob": glob, "order": "path"}
    )
    assert response.status_code == 200, response.content
    assert sorted(a["path"] for a in response.json()["results"]) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"path": "sub-1/"}, ["sub-1/a.zarr", "sub-1/b.zarr"]),  # a folder: dandi's prefix
        ({"path": "sub-1/b.zarr"}, ["sub-1/b.zarr"]),
        ({"path": "SUB-1/"}, []),
        ({"path": "sub-2/", "glob": "*/a.zarr"}, ["sub-2/a.zarr", "sub-2/deep/A.zarr"]),
    ],
)
def test_path_is_a_prefix_and_combines_with_glob(
    listed: tuple[Actor, str], query: dict[str, str], expected: list[str]
) -> None:
    owner, dandiset = listed
    url = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    found = owner.client.get(url, query).json()["results"]
    assert sorted(a["path"] for a in found) == expected


@pytest.mark.parametrize("glob", ["", "a" * 1025, "a\x00b"])
def test_bad_glob_is_a_400(listed: tuple[Actor, str], glob: str) -> None:
    owner, dandiset = listed
    response = owner.client.get(f"/api/dandisets/{dandiset}/versions/draft/assets/", {"glob": glob})
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_asset_glob"
