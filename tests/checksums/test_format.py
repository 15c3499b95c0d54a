"""Fixed vectors for the serialization, and strict decoding of .checksum files."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.checksums import (
    EMPTY_DIGEST,
    ChecksumFormatError,
    DirectoryEntry,
    DirectoryListing,
    FileEntry,
    compute_tree,
    decode_checksum_file,
    encode_checksum_file,
    parse_directory_digest,
)
from dandizarr.checksums.paths import directories_above
from tests.support.checksum_reference import reference_tree
from tests.support.checksum_strategies import md5s, sizes

MD5_A = "0123456789abcdef0123456789abcdef"
MD5_B = "fedcba9876543210fedcba9876543210"


def md5_of(text: str) -> str:
    return hashlib.md5(text.encode("ascii")).hexdigest()


def test_empty_archive() -> None:
    assert md5_of('{"directories":[],"files":[]}') + "-0--0" == EMPTY_DIGEST
    assert compute_tree([]).digest == EMPTY_DIGEST
    assert (compute_tree([]).count, compute_tree([]).size) == (0, 0)
    assert DirectoryListing().digest() == EMPTY_DIGEST
    assert encode_checksum_file(DirectoryListing()) == (
        b'{"checksums":{"directories":[],"files":[]},"digest":"' + EMPTY_DIGEST.encode() + b'"}'
    )


def test_one_file_written_out_by_hand() -> None:
    level3 = '{"directories":[],"files":[{"digest":"' + MD5_A + '","name":"foo.bar","size":42}]}'
    digest3 = md5_of(level3) + "-1--42"
    level2 = '{"directories":[{"digest":"' + digest3 + '","name":"3","size":42}],"files":[]}'
    digest2 = md5_of(level2) + "-1--42"
    level1 = '{"directories":[{"digest":"' + digest2 + '","name":"2","size":42}],"files":[]}'
    digest1 = md5_of(level1) + "-1--42"
    root = '{"directories":[{"digest":"' + digest1 + '","name":"1","size":42}],"files":[]}'
    digest0 = md5_of(root) + "-1--42"

    seen: dict[str, bytes] = {}
    summary = compute_tree(
        [("1/2/3/foo.bar", 42, MD5_A)],
        on_directory=lambda path, listing: seen.__setitem__(path, encode_checksum_file(listing)),
    )
    assert summary.digest == digest0
    assert list(seen) == ["1/2/3", "1/2", "1", ""]  # children before parents
    assert seen["1/2/3"] == f'{{"checksums":{level3},"digest":"{digest3}"}}'.encode()
    assert seen[""] == f'{{"checksums":{root},"digest":"{digest0}"}}'.encode()


def test_code_point_order_of_names() -> None:
    names = ["a_b", "a.b", "a-b", "a", "_", "Z", "B"]
    text = (
        '{"directories":[],"files":['
        + ",".join(
            f'{{"digest":"{MD5_A}","name":"{name}","size":1}}'
            for name in ["B", "Z", "_", "a", "a-b", "a.b", "a_b"]
        )
        + "]}"
    )
    summary = compute_tree([(name, 1, MD5_A) for name in names])
    assert summary.digest == md5_of(text) + "-7--7"


def test_sorted_path_order_differs_from_name_order() -> None:
    # As paths "a-b/x" < "a/y", but as names "a" < "a-b": both inputs must agree.
    entries = [("a-b/x", 1, MD5_A), ("a/y", 2, MD5_B)]
    seen: dict[str, bytes] = {}
    summary = compute_tree(
        iter(entries), on_directory=lambda p, lst: seen.__setitem__(p, encode_checksum_file(lst))
    )
    root = json.loads(seen[""])["checksums"]["directories"]
    assert [entry["name"] for entry in root] == ["a", "a-b"]
    assert summary.digest == reference_tree({"a-b/x": (1, MD5_A), "a/y": (2, MD5_B)})[""][1]


def test_escaping_written_out_by_hand() -> None:
    # json.dumps escapes: quote, backslash, tab, DEL, non-ASCII, non-BMP as a surrogate pair.
    entries = [('q"', 1, MD5_A), ("b\\", 2, MD5_A), ("t\t", 3, MD5_A), ("d\x7f", 4, MD5_A)]
    entries += [("é", 5, MD5_A), ("\U0001f600", 6, MD5_A)]
    expected_names = [r'"b\\"', r'"d\u007f"', r'"q\""', r'"t\t"', r'"\u00e9"', r'"\ud83d\ude00"']
    text = (
        '{"directories":[],"files":['
        + ",".join(
            f'{{"digest":"{MD5_A}","name":{name},"size":{size}}}'
            for name, size in zip(expected_names, [2, 4, 1, 3, 5, 6], strict=True)
        )
        + "]}"
    )
    assert compute_tree(entries).digest == md5_of(text) + "-6--21"


def test_escaped_directory_names() -> None:
    files = {"é/x": (1, MD5_A), 'q"/\U0001f600/y': (2, MD5_B), "plain/z": (3, MD5_A)}
    seen: dict[str, bytes] = {}
    compute_tree(
        files_entries(files),
        on_directory=lambda p, lst: seen.__setitem__(p, encode_checksum_file(lst)),
    )
    expected = reference_tree(files)
    assert seen == {directory: value[0] for directory, value in expected.items()}
    assert rb'"name":"\u00e9"' in seen[""]


def files_entries(files: dict[str, tuple[int, str]]) -> list[tuple[str, int, str]]:
    return [(path, size, md5) for path, (size, md5) in files.items()]


@given(
    st.dictionaries(
        st.text(min_size=1).filter(lambda s: "/" not in s and s not in (".", "..")),
        st.tuples(sizes, md5s),
        max_size=20,
    )
)
def test_any_names_match_json_dumps(files: dict[str, tuple[int, str]]) -> None:
    listing = DirectoryListing({n: FileEntry(n, m, s) for n, (s, m) in files.items()})
    expected = reference_tree(files)[""]
    assert encode_checksum_file(listing) == expected[0]
    assert compute_tree(files_entries(files)).digest == expected[1]
    assert decode_checksum_file(expected[0]) == listing


def test_parse_directory_digest() -> None:
    assert parse_directory_digest(f"{MD5_A}-3--12") == (MD5_A, 3, 12)
    assert parse_directory_digest(EMPTY_DIGEST) == (EMPTY_DIGEST[:32], 0, 0)
    for bad in [
        MD5_A,
        f"{MD5_A}-3-12",
        f"{MD5_A}-3--",
        f"{MD5_A.upper()}-1--1",
        f"{MD5_A}-01--1",
        f"{MD5_A}--1--1",
        f"{MD5_A}-1--1\n",
        "",
        5,
    ]:
        with pytest.raises(ChecksumFormatError):
            parse_directory_digest(bad)  # type: ignore[arg-type]


def test_entries_validate() -> None:
    assert DirectoryEntry("d", f"{MD5_A}-3--12", 12).count == 3
    with pytest.raises(ChecksumFormatError, match="does not match"):
        DirectoryEntry("d", f"{MD5_A}-3--12", 13)
    for name, digest, size in [
        ("", MD5_A, 1),
        ("a/b", MD5_A, 1),
        ("..", MD5_A, 1),
        ("a", MD5_A.upper(), 1),
        ("a", MD5_A, -1),
        ("a", MD5_A, True),
        ("a", MD5_A, 1.0),
    ]:
        with pytest.raises(ChecksumFormatError):
            FileEntry(name, digest, size)  # type: ignore[arg-type]


def sample_listing() -> DirectoryListing:
    return DirectoryListing(
        {"x": FileEntry("x", MD5_A, 3), "y": FileEntry("y", MD5_B, 4)},
        {"d": DirectoryEntry("d", f"{MD5_B}-2--10", 10)},
    )


def test_listing_totals_and_round_trip() -> None:
    listing = sample_listing()
    assert (listing.count, listing.size) == (4, 17)
    assert listing.digest().endswith("-4--17")
    assert not listing.is_empty()
    data = encode_checksum_file(listing)
    assert b" " not in data
    assert decode_checksum_file(data) == listing


def tamper(change: object) -> bytes:
    document = json.loads(encode_checksum_file(sample_listing()))
    change(document)  # type: ignore[operator]
    return json.dumps(document, separators=(",", ":")).encode()


def _set(path: list[object], value: object) -> object:
    def apply(document: dict) -> None:  # type: ignore[type-arg]
        target = document
        for key in path[:-1]:
            target = target[key]  # type: ignore[index]
        target[path[-1]] = value  # type: ignore[index]

    return apply


def _recompute_digest(document: dict) -> None:  # type: ignore[type-arg]
    # Keep the digest consistent with a tampered listing, to reach the deeper checks.
    checksums = document["checksums"]
    text = json.dumps(checksums, separators=(",", ":"))
    count = len(checksums["files"]) + sum(
        int(d["digest"].split("-")[1]) for d in checksums["directories"]
    )
    size = sum(e["size"] for e in checksums["files"] + checksums["directories"])
    document["digest"] = f"{md5_of(text)}-{count}--{size}"


FILES = ["checksums", "files"]
DIRS = ["checksums", "directories"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff", "not valid JSON"),
        (b"[]", "keys"),
        (tamper(lambda d: d.pop("digest")), "keys"),
        (tamper(lambda d: d.__setitem__("extra", 1)), "keys"),
        (tamper(lambda d: d["checksums"].pop("files")), "keys"),
        (tamper(_set(FILES, {})), "must be a list"),
        (tamper(_set([*FILES, 0], [1])), "must be an object"),
        (tamper(lambda d: d["checksums"]["files"][0].pop("size")), "must be an object"),
        (tamper(_set([*FILES, 0, "size"], "3")), "size"),
        (tamper(_set([*FILES, 0, "size"], -3)), "size"),
        (tamper(_set([*FILES, 0, "size"], 3.0)), "size"),
        (tamper(_set([*FILES, 0, "name"], 7)), "invalid name"),
        (tamper(_set([*FILES, 0, "name"], "a/b")), "invalid name"),
        (tamper(_set([*FILES, 0, "name"], "")), "invalid name"),
        (tamper(_set([*FILES, 0, "name"], ".")), "invalid name"),
        (tamper(_set([*FILES, 0, "name"], "..")), "invalid name"),
        (tamper(_set([*DIRS, 0, "name"], "..")), "invalid name"),
        (tamper(_set([*FILES, 0, "digest"], MD5_A.upper())), "not an md5"),
        (tamper(_set([*FILES, 0, "digest"], MD5_A + "-2")), "not an md5"),
        (tamper(_set([*DIRS, 0, "digest"], MD5_A)), "not a directory digest"),
        (tamper(_set([*DIRS, 0, "size"], 11)), "does not match digest"),
        (tamper(_set(["digest"], f"{MD5_A}-4--17")), "does not match the listing"),
        (
            tamper(_set(["digest"], f"{sample_listing().digest()[:32]}-5--17")),
            "does not match the listing",
        ),
        (tamper(_set(["digest"], 5)), "does not match the listing"),
        (tamper(lambda d: d["checksums"]["files"].reverse()), "unsorted"),
        (
            tamper(lambda d: d["checksums"]["files"].insert(1, d["checksums"]["files"][0])),
            "duplicate",
        ),
        (
            tamper(lambda d: (_set([*FILES, 0, "name"], "d")(d), _recompute_digest(d))),
            "both a file and a directory",
        ),
        (encode_checksum_file(sample_listing()).replace(b":", b": "), "canonical"),
        (
            encode_checksum_file(sample_listing()).replace(
                b'"name":"x",', b'"name":"x","name":"x",'
            ),
            "canonical",
        ),
    ],
)
def test_decode_rejects(data: bytes, message: str) -> None:
    with pytest.raises(ChecksumFormatError, match=message):
        decode_checksum_file(data)


def test_decode_rejects_unescaped_non_ascii() -> None:
    listing = DirectoryListing({"é": FileEntry("é", MD5_A, 1)})
    data = encode_checksum_file(listing)
    assert decode_checksum_file(data) == listing
    with pytest.raises(ChecksumFormatError, match="canonical"):
        decode_checksum_file(data.replace(rb"\u00e9", "é".encode()))


@pytest.mark.parametrize(
    "name", ["d\x7f", "c\x1f", 'q"', "b\\", "é", "\U0001f600", "\u2028", "~ !#[]", "\x00"]
)
def test_each_escaped_character_alone(name: str) -> None:
    # Alone in its directory, so no other name forces the escaping path.
    expected = reference_tree({name: (1, MD5_A), f"d/{name}": (2, MD5_B)})
    assert compute_tree([(name, 1, MD5_A), (f"d/{name}", 2, MD5_B)]).digest == expected[""][1]
    assert (
        encode_checksum_file(DirectoryListing({name: FileEntry(name, MD5_A, 1)}))
        == (reference_tree({name: (1, MD5_A)})[""][0])
    )


def test_directories_above_every_path_without_the_root() -> None:
    paths = ["a/b/c", "a/b/d", "a/x", "top", "e/f/g/h"]
    assert directories_above(paths) == {"a", "a/b", "e", "e/f", "e/f/g"}
    assert directories_above(iter(["top"])) == set()
