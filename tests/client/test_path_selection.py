"""The include/exclude patterns of a partial download (``PathSelection``): glob components,
``**``, a pattern naming a directory takes what is under it, excludes win; and the directory
the listing can start from."""

from __future__ import annotations

import pytest

from dandizarr.client.errors import ClientError
from dandizarr.client.path_selection import PathSelection

PATHS = [
    ".zattrs",
    "zarr.json",
    "0/zarr.json",
    "0/c/0/0",
    "0/c/0/1",
    "0/c/1/0",
    "0/c/10/0",
    "1/zarr.json",
    "1/c/0/0",
    "labels/x/zarr.json",
    "[a]/b",
]


@pytest.mark.parametrize(
    ("includes", "excludes", "expected"),
    [
        ((), (), PATHS),
        (("0/c/0",), (), ["0/c/0/0", "0/c/0/1"]),  # a directory: everything under it
        (("0/c/1",), (), ["0/c/1/0"]),  # a whole component: not 0/c/10
        (("0/c/1*",), (), ["0/c/1/0", "0/c/10/0"]),
        (("*/c/0/?",), (), ["0/c/0/0", "0/c/0/1", "1/c/0/0"]),
        (("**/zarr.json",), (), ["zarr.json", "0/zarr.json", "1/zarr.json", "labels/x/zarr.json"]),
        (("*/zarr.json",), (), ["0/zarr.json", "1/zarr.json"]),  # * stays within a name
        (("0/**/0",), (), ["0/c/0/0", "0/c/0/1", "0/c/1/0", "0/c/10/0"]),
        (("[01]/c/0/0",), (), ["0/c/0/0", "1/c/0/0"]),
        (("[!0]/zarr.json",), (), ["1/zarr.json"]),
        (("[[]a]/b",), (), ["[a]/b"]),
        (("0",), ("0/c/0", "**/zarr.json"), ["0/c/1/0", "0/c/10/0"]),
        ((), ("0", "1", "labels"), [".zattrs", "zarr.json", "[a]/b"]),
        (("/0/c/0/",), (), ["0/c/0/0", "0/c/0/1"]),  # slashes at the ends do not count
        (("0/C/0",), (), []),  # case counts
    ],
)
def test_selection(
    includes: tuple[str, ...], excludes: tuple[str, ...], expected: list[str]
) -> None:
    selection = PathSelection(includes, excludes)
    assert [p for p in PATHS if selection.selects(p)] == expected
    assert selection.partial == bool(includes or excludes)


@pytest.mark.parametrize(
    ("includes", "root"),
    [
        ((), ""),
        (("0/c/0/1",), "0/c/0"),  # the last component may be a file
        (("0/c/0/*", "0/c/1"), "0/c"),
        (("0/c/*/0",), "0/c"),
        (("**/zarr.json", "0/c"), ""),
        (("0/c", "1/c"), ""),
    ],
)
def test_listing_root(includes: tuple[str, ...], root: str) -> None:
    assert PathSelection(includes).listing_root() == root


@pytest.mark.parametrize(("pattern", "said"), [("/", "empty pattern"), ("[z-a]", "bad pattern")])
def test_a_bad_pattern_is_a_client_error(pattern: str, said: str) -> None:
    with pytest.raises(ClientError, match=said):
        PathSelection((), (pattern,))
