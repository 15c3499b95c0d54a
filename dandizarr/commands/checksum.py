"""`dandizarr checksum`: the tree hash of a local directory or of a listing file.

Never imports Django: only the ``checksums`` library.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from checksums import (
    ChecksumFormatError,
    TreeSummary,
    UnsortedEntriesError,
    compute_tree,
    is_md5,
)
from checksums.local import iter_local_files, md5_files
from dandizarr.commands import Subparsers
from dandizarr.commands.errors import CommandError

_SIZE = re.compile(r"[0-9]+")


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
    for number, line in enumerate(lines, start=1):
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


def _listing_summary(name: str) -> TreeSummary:
    if name == "-":
        # stdin cannot be re-read: collect it, compute_tree sorts a list if it needs to.
        return compute_tree(list(parse_listing(sys.stdin)))
    try:
        with open(name, encoding="utf-8", newline="\n") as file:
            try:
                return compute_tree(parse_listing(file))  # streams when sorted
            except UnsortedEntriesError:
                file.seek(0)
                return compute_tree(list(parse_listing(file)))
    except FileNotFoundError:
        raise CommandError(f"{name}: no such file") from None
    except UnicodeDecodeError as error:
        raise CommandError(f"{name}: not UTF-8 text ({error.reason})") from None


def _directory_summary(root: Path, jobs: int) -> TreeSummary:
    if not root.exists():
        raise CommandError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise CommandError(f"{root}: not a directory")
    paths = (path for path, _ in iter_local_files(root))
    return compute_tree(md5_files(root, paths, jobs=jobs))


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
