"""`dandizarr checksum`: the tree hash of a local directory or of a listing file.

Never imports Django: only the ``checksums`` library. A listing is parsed a block of lines
at a time into columns (``parse_listing_columns``) for ``compute_tree_columns``: a million
lines in C-level passes, with ``parse_listing``'s checks and its error for the first bad line.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from dandizarr.checksums import (
    ChecksumFormatError,
    TreeSummary,
    UnsortedEntriesError,
    compute_tree,
    is_md5,
)
from dandizarr.checksums.listing import all_md5
from dandizarr.checksums.tree import Columns, compute_tree_columns
from dandizarr.commands import Subparsers
from dandizarr.commands.errors import CommandError

_SIZE = re.compile(r"[0-9]+")
# How much of a listing is read and parsed at once (about 20,000 lines).
_BLOCK_BYTES = 1 << 20
# bytes.translate deletes these: every byte but tab and newline.
_NOT_SEPARATORS = bytes(sorted(set(range(256)) - {ord("\t"), ord("\n")}))
_LEADING_ZERO_SIZE = re.compile(r"\t0[0-9]")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "checksum",
        help="print the zarr tree checksum of a local directory or a listing",
        description=(
            "Print the zarr tree checksum ('<md5>-<file count>--<total size>') of a local "
            "directory, or of a listing of 'path<TAB>size<TAB>md5' lines (e.g. from an S3 "
            "inventory)."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("path", nargs="?", type=Path, help="local directory (the archive root)")
    source.add_argument(
        "--listing",
        metavar="FILE",
        help="read 'path<TAB>size<TAB>md5' lines from FILE ('-' = stdin)",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=os.cpu_count() or 1,
        help="files hashed in parallel (default: number of CPUs)",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="also print the file count and total size"
    )
    parser.set_defaults(func=run)


def parse_listing(lines: IO[str]) -> Iterator[tuple[str, int, str]]:
    """Entries from 'path<TAB>size<TAB>md5' lines; ChecksumFormatError naming the bad line."""
    return parse_listing_from(lines, 1)


def parse_listing_from(lines: Iterable[str], first: int) -> Iterator[tuple[str, int, str]]:
    """``parse_listing`` of lines numbered from ``first``."""
    for number, line in enumerate(lines, start=first):
        fields = line.removesuffix("\n").removesuffix("\r").split("\t")
        if len(fields) != 3:
            raise ChecksumFormatError(
                f"line {number}: expected 'path<TAB>size<TAB>md5', got {len(fields)} field(s)"
            )
        path, size, md5 = fields
        if not _SIZE.fullmatch(size):
            raise ChecksumFormatError(f"line {number}: size is not a number: {size!r}")
        if not is_md5(md5):
            hint = " (a multipart ETag is not an md5)" if "-" in md5 else ""
            raise ChecksumFormatError(
                f"line {number}: not an md5 (32 lowercase hex digits): {md5!r}{hint}"
            )
        yield path, int(size), md5


def _parse_block(data: bytes) -> Columns | None:
    """The columns of whole lines ending in "\n" when every line is well-formed, in C-level
    passes over the block; None when any is not (``parse_listing`` then names the line)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    # Every line has exactly two tabs iff the separators alone read "\t\t\n" once per line:
    # then one split at both gives the fields in order, three per line (and a final "").
    separators = data.translate(None, _NOT_SEPARATORS)
    if not separators or separators != b"\t\t\n" * (len(separators) // 3):
        return None
    fields = data.decode("utf-8").replace("\n", "\t").split("\t")
    md5s = fields[2::3]
    if not all_md5(md5s):
        return None
    sizes = fields[1::3]
    digits = "".join(sizes)
    if not (digits.isascii() and digits.isdigit()) or "" in sizes:
        return None
    # Sizes stay text, as the tree's JSON writes them, once without leading zeros (looked for
    # only where a size starts with "0": a size of 0 is common).
    tabbed = "\t" + "\t".join(sizes)
    if "\t0" in tabbed and _LEADING_ZERO_SIZE.search(tabbed):
        sizes = list(map(str, map(int, sizes)))
    return fields[0:-1:3], sizes, md5s


def parse_listing_columns(file: IO[bytes], block_bytes: int = _BLOCK_BYTES) -> Iterator[Columns]:
    """``parse_listing`` of a binary file (UTF-8) as consecutive chunks of columns (paths,
    sizes, md5s): the same entries and the same errors, parsed about ``block_bytes`` at a
    time (whole lines), but each size as its decimal text (``str(size)``). UnicodeDecodeError
    for a block that is not UTF-8."""
    first_line = 1
    while block := file.read(block_bytes):
        if not block.endswith(b"\n"):
            block += file.readline()  # the rest of the line (a buffered file finds it)
            if not block.endswith(b"\n"):  # the last line, without its newline
                block += b"\n"
        columns = _parse_block(block)
        if columns is None:
            text = block.decode("utf-8")
            lines = [line + "\n" for line in text.split("\n")[:-1]]  # as a file iterates them
            entries = list(parse_listing_from(lines, first_line))
            columns = [e[0] for e in entries], [str(e[1]) for e in entries], [e[2] for e in entries]
        yield columns
        first_line += len(columns[0])


def _listing_summary(name: str) -> TreeSummary:
    if name == "-":
        # stdin cannot be re-read: collect it, compute_tree sorts a list if it needs to.
        return compute_tree(list(parse_listing(sys.stdin)))
    try:
        with open(name, "rb") as file:
            try:
                # Streams when sorted; the parser has checked every md5 and size.
                return compute_tree_columns(parse_listing_columns(file), checked=True)
            except UnsortedEntriesError:
                pass
        with open(name, encoding="utf-8", newline="\n") as lines:
            return compute_tree(list(parse_listing(lines)))
    except FileNotFoundError:
        raise CommandError(f"{name}: no such file") from None
    except UnicodeDecodeError as error:
        raise CommandError(f"{name}: not UTF-8 text ({error.reason})") from None


def _directory_summary(root: Path, jobs: int) -> TreeSummary:
    # On first use: its thread pool (concurrent.futures, logging) is a third of the start-up
    # of `dandizarr checksum --listing`, which does not need it.
    from dandizarr.checksums.local import iter_local_paths, md5_files

    if not root.exists():
        raise CommandError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise CommandError(f"{root}: not a directory")
    return compute_tree(md5_files(root, iter_local_paths(root), jobs=jobs))


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise CommandError("--jobs must be at least 1")
    try:
        if args.listing is not None:
            summary = _listing_summary(args.listing)
        else:
            summary = _directory_summary(args.path, args.jobs)
    except ChecksumFormatError as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"{error.filename or ''}: {error.strerror or error}") from None
    print(summary.digest)
    if args.verbose:
        print(f"{summary.count} files, {summary.size} bytes")
    return 0
