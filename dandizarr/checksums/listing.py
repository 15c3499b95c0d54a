"""Directory listings, their canonical JSON, digests and the ``.checksum`` file format.

The canonical JSON of a listing is exactly what
``json.dumps({"directories": [...], "files": [...]}, separators=(",", ":"))`` gives with
entries ``{"digest", "name", "size"}`` sorted by name in code-point order. It is built here
over whole columns (one join of the files' pieces, ``%``-formatting of the directories')
instead of ``json.dumps`` of dicts: the output is the same bytes, an order of magnitude
faster (tests compare both on random names).
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from json.encoder import encode_basestring_ascii  # the C encoder json.dumps itself uses
from operator import attrgetter, itemgetter, lt
from typing import Any

# The tree hash of an empty archive: the md5 of the empty listing's JSON, 0 files, 0 bytes.
EMPTY_DIGEST = "481a2f77ab786a0f45aafd5db0971caa-0--0"


class ChecksumFormatError(ValueError):
    """Malformed input: a .checksum file, a digest, a path, a listing entry."""


_MD5 = re.compile(r"[0-9a-f]{32}")
_HEX_RUN = re.compile(r"[0-9a-f]*")
_HEX_DIGITS = b"0123456789abcdef"
_DIR_DIGEST = re.compile(r"([0-9a-f]{32})-(0|[1-9][0-9]*)--(0|[1-9][0-9]*)")
# Characters json.dumps (ensure_ascii) writes verbatim: printable ASCII except '"' and '\'.
_NEEDS_ESCAPE = re.compile(r"[^ !#-\[\]-~]")
_BAD_NAMES = ("", ".", "..")

_DIR_PLAIN = '{"digest":"%s-%d--%d","name":"%s","size":%d}'
_DIR_QUOTED = '{"digest":"%s-%d--%d","name":%s,"size":%d}'


def is_md5(value: object) -> bool:
    """A file digest (and an S3 ETag of a single-part upload) is an md5 as 32 lowercase hex."""
    return type(value) is str and _MD5.fullmatch(value) is not None


def all_md5(values: Sequence[str]) -> bool:
    """``is_md5`` of every value at once, in C-level passes (TypeError if one is not a str)."""
    if not set(map(len, values)) <= {32}:
        return False
    joined = "".join(values)
    return joined.isascii() and not joined.encode("ascii").translate(None, _HEX_DIGITS)


def check_md5(value: object, what: str) -> str:
    if not is_md5(value):
        raise ChecksumFormatError(f"{what}: not an md5 hex digest (32 lowercase hex): {value!r}")
    return value  # type: ignore[return-value]


def check_size(value: object, what: str) -> int:
    # bool is an int subclass and '%d' would happily print floats: insist on a real int.
    if type(value) is not int or value < 0:
        raise ChecksumFormatError(f"{what}: size must be a non-negative integer: {value!r}")
    return value


def check_name(value: object, what: str) -> str:
    if type(value) is not str or value in _BAD_NAMES or "/" in value:
        raise ChecksumFormatError(f"{what}: invalid name {value!r}")
    return value


def parse_directory_digest(digest: str) -> tuple[str, int, int]:
    """``"md5-count--size"`` -> (md5, count, size)."""
    match = _DIR_DIGEST.fullmatch(digest) if type(digest) is str else None
    if match is None:
        raise ChecksumFormatError(f"not a directory digest ('<md5>-<count>--<size>'): {digest!r}")
    return match[1], int(match[2]), int(match[3])


@dataclass(frozen=True, slots=True)
class FileEntry:
    name: str
    digest: str  # md5 hex
    size: int

    def __post_init__(self) -> None:
        check_name(self.name, "file entry")
        check_md5(self.digest, f"file {self.name!r}")
        check_size(self.size, f"file {self.name!r}")


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    name: str
    digest: str  # "md5-count--size"
    size: int
    # Parsed from the digest once (encoding and counting need them for every entry).
    md5: str = field(init=False, repr=False, compare=False)
    count: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name(self.name, "directory entry")
        md5, count, size = parse_directory_digest(self.digest)
        if size != self.size:
            raise ChecksumFormatError(
                f"directory {self.name!r}: size {self.size!r} does not match digest {self.digest}"
            )
        object.__setattr__(self, "md5", md5)
        object.__setattr__(self, "count", count)


# The slot descriptors write straight into the slots, past the frozen __setattr__.
_set_name = vars(FileEntry)["name"].__set__
_set_digest = vars(FileEntry)["digest"].__set__
_set_size = vars(FileEntry)["size"].__set__
_new = object.__new__


def _file_entry(name: str, digest: str, size: int) -> FileEntry:
    """Build without re-validating: callers have validated whole columns at once."""
    entry: FileEntry = _new(FileEntry)
    _set_name(entry, name)
    _set_digest(entry, digest)
    _set_size(entry, size)
    return entry


def file_entries(
    names: Sequence[str], md5s: Sequence[str], sizes: Sequence[int]
) -> dict[str, FileEntry]:
    """{name: FileEntry} from validated columns."""
    return dict(zip(names, map(_file_entry, names, md5s, sizes), strict=True))


@lru_cache(maxsize=256)
def _repeated(template: str, n: int) -> str:
    return ",".join([template] * n)


def _template(template: str, n: int) -> str:
    # Cache only small fan-outs: a template is ~40 bytes per entry.
    return _repeated(template, n) if n <= 4096 else ",".join([template] * n)


def _names_plain(names: Sequence[str]) -> bool:
    return _NEEDS_ESCAPE.search("".join(names)) is None


def files_json(names: Sequence[str], md5s: Sequence[str], sizes: Sequence[int | str]) -> str:
    """The comma-separated file entries, for names already sorted and columns validated.
    ``sizes``: ints, or their decimal text as a parsed listing has it (canonical: no leading
    zeros). One join of the pieces: several times faster than %-formatting the entries, and
    converting a parsed size to int and back would cost more than the rest of its entry."""
    n = len(names)
    if n == 0:
        return ""
    if _names_plain(names):
        after_md5, after_name = '","name":"', '","size":'
    else:
        names = [encode_basestring_ascii(name) for name in names]  # quoted
        after_md5, after_name = '","name":', ',"size":'
    pieces = ['},{"digest":"'] * (6 * n)
    pieces[0] = '{"digest":"'
    pieces[1::6] = md5s
    pieces[2::6] = [after_md5] * n
    pieces[3::6] = names
    pieces[4::6] = [after_name] * n
    pieces[5::6] = map(str, sizes)  # a str is its own str
    pieces.append("}")
    return "".join(pieces)


def directories_json(entries: Sequence[tuple[str, str, int, int]]) -> str:
    """The comma-separated directory entries from sorted (name, md5, count, size) tuples."""
    n = len(entries)
    if n == 0:
        return ""
    names = [entry[0] for entry in entries]
    plain = _names_plain(names)
    flat: list[object] = []
    for name, md5, count, size in entries:
        flat += (md5, count, size, name if plain else encode_basestring_ascii(name), size)
    return _template(_DIR_PLAIN if plain else _DIR_QUOTED, n) % tuple(flat)


def listing_json(directories: str, files: str) -> str:
    return '{"directories":[' + directories + '],"files":[' + files + "]}"


def make_digest(json_text: str, count: int, size: int) -> str:
    return f"{hashlib.md5(json_text.encode('ascii')).hexdigest()}-{count}--{size}"


_digest_of = attrgetter("digest")
_size_of = attrgetter("size")
_count_of = attrgetter("count")


@dataclass(eq=True)
class DirectoryListing:
    """One directory's immediate children, keyed by name (O(1) updates)."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    directories: dict[str, DirectoryEntry] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Files recursively below this directory."""
        return len(self.files) + sum(map(_count_of, self.directories.values()))

    @property
    def size(self) -> int:
        """Total size of the files recursively below this directory."""
        return sum(map(_size_of, self.files.values())) + sum(
            map(_size_of, self.directories.values())
        )

    def is_empty(self) -> bool:
        return not self.files and not self.directories

    def set_file(self, entry: FileEntry) -> None:
        self.files[entry.name] = entry

    def set_directory(self, entry: DirectoryEntry) -> None:
        self.directories[entry.name] = entry

    def copy(self) -> DirectoryListing:
        return DirectoryListing(dict(self.files), dict(self.directories))

    def conflicts(self) -> list[str]:
        """Names that are both a file and a directory here (never valid)."""
        return sorted(self.files.keys() & self.directories.keys())

    def to_json(self) -> str:
        """The canonical JSON that is hashed."""
        file_names = sorted(self.files)
        files = list(map(self.files.__getitem__, file_names))
        dirs = []
        for name in sorted(self.directories):
            entry = self.directories[name]
            dirs.append((name, entry.md5, entry.count, entry.size))
        return listing_json(
            directories_json(dirs),
            files_json(file_names, list(map(_digest_of, files)), list(map(_size_of, files))),
        )

    def digest(self) -> str:
        return make_digest(self.to_json(), self.count, self.size)

    def summary(self) -> tuple[str, int, int]:
        """(digest, count, size) with the JSON built once."""
        count, size = self.count, self.size
        return make_digest(self.to_json(), count, size), count, size


def encode_checksum_file(listing: DirectoryListing) -> bytes:
    text = listing.to_json()
    digest = make_digest(text, listing.count, listing.size)
    return ('{"checksums":' + text + ',"digest":"' + digest + '"}').encode("ascii")


# ---- decoding -------------------------------------------------------------------------------

_ENTRY_KEYS = frozenset({"digest", "name", "size"})
_get_name = itemgetter("name")
_get_digest = itemgetter("digest")
_get_size = itemgetter("size")


def _entry_columns(raw: object, kind: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The name, digest and size columns, validated over whole columns (C loops); the slow
    per-entry loop runs only to explain a failure."""
    if type(raw) is not list:
        raise ChecksumFormatError(f'"{kind}" must be a list, not {type(raw).__name__}')
    try:
        if raw and (set(map(type, raw)) != {dict} or set(map(len, raw)) != {3}):
            raise KeyError
        names = list(map(_get_name, raw))
        digests = list(map(_get_digest, raw))
        sizes = list(map(_get_size, raw))
    except KeyError:
        for index, entry in enumerate(raw):
            if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
                raise ChecksumFormatError(
                    f'{kind}[{index}] must be an object with keys "digest", "name", "size":'
                    f" {entry!r}"
                ) from None
        raise AssertionError("unreachable") from None
    if not names:
        return names, digests, sizes
    names_ok = (
        set(map(type, names)) == {str}
        and "/" not in "".join(names)
        and all(map(lt, names, names[1:]))  # strictly ascending: sorted and unique
    )
    if names_ok:  # sorted: "" would be first, "." and ".." next to where "." sorts
        dot = bisect_left(names, ".")
        names_ok = names[0] != "" and not {".", ".."} & set(names[dot : dot + 2])
    if not names_ok:
        for index, name in enumerate(names):
            check_name(name, f"{kind}[{index}]")
        for index in range(1, len(names)):
            if not names[index - 1] < names[index]:
                problem = "duplicate" if names[index - 1] == names[index] else "unsorted"
                raise ChecksumFormatError(
                    f"{kind}: {problem} names {names[index - 1]!r}, {names[index]!r}"
                    " (names must be unique and sorted by code point)"
                )
    if set(map(type, sizes)) != {int} or min(sizes) < 0:
        for index, size in enumerate(sizes):
            check_size(size, f"{kind}[{index}] ({names[index]!r})")
    return names, digests, sizes


def decode_checksum_file(data: bytes) -> DirectoryListing:
    """Parse and strictly validate a ``.checksum`` file (canonical bytes only)."""
    try:
        document = json.loads(data)
    except (ValueError, TypeError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise ChecksumFormatError(f".checksum is not valid JSON: {error}") from None
    if type(document) is not dict or document.keys() != {"checksums", "digest"}:
        raise ChecksumFormatError('.checksum must be an object with keys "checksums", "digest"')
    checksums = document["checksums"]
    if type(checksums) is not dict or checksums.keys() != {"directories", "files"}:
        raise ChecksumFormatError('"checksums" must be an object with keys "directories", "files"')
    file_names, file_digests, file_sizes = _entry_columns(checksums["files"], "files")
    dir_names, dir_digests, dir_sizes = _entry_columns(checksums["directories"], "directories")

    joined = "".join(d if type(d) is str else "?" for d in file_digests)
    if len(joined) != 32 * len(file_digests) or _HEX_RUN.fullmatch(joined) is None:
        for index, digest in enumerate(file_digests):
            check_md5(digest, f"files[{index}] ({file_names[index]!r})")
    listing = DirectoryListing(file_entries(file_names, file_digests, file_sizes))
    for index, (name, digest, size) in enumerate(
        zip(dir_names, dir_digests, dir_sizes, strict=True)
    ):
        try:
            listing.directories[name] = DirectoryEntry(name, digest, size)
        except ChecksumFormatError as error:
            raise ChecksumFormatError(f"directories[{index}]: {error}") from None
    both = listing.conflicts()
    if both:
        raise ChecksumFormatError(f"names both a file and a directory: {both}")

    text = listing.to_json()
    expected = make_digest(text, listing.count, listing.size)
    if document["digest"] != expected:
        raise ChecksumFormatError(
            f"digest {document['digest']!r} does not match the listing (expected {expected})"
        )
    canonical = '{"checksums":' + text + ',"digest":"' + expected + '"}'
    if data != canonical.encode("ascii"):
        raise ChecksumFormatError(
            ".checksum is not in canonical form (spacing, key order, escaping or duplicate keys)"
        )
    return listing


def sorted_names_conflict(sorted_files: Sequence[str], dir_names: Sequence[str]) -> str | None:
    """A directory name that is also among the sorted file names, if any (binary search)."""
    for name in dir_names:
        index = bisect_left(sorted_files, name)
        if index < len(sorted_files) and sorted_files[index] == name:
            return name
    return None
