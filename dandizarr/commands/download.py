"""``dandizarr download``: fetch an archive with parallel GETs and verify its checksum."""

from __future__ import annotations

import argparse
import json
import sys

from dandizarr.commands import Subparsers
from dandizarr.commands.connection import (
    add_connection_arguments,
    client_errors,
    json_errors,
    make_client,
    make_progress,
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "download",
        help="download a zarr archive and verify its checksum",
        description="Download the archive ZARR_ID into DEST. Files already in DEST with the "
        "right md5 are kept, so an interrupted download resumes. Exit status 0 only when the "
        "downloaded tree's checksum equals the server's; with --include/--exclude, only when every "
        "selected file arrived with the server's md5 (docs/partial-work.md).",
    )
    parser.add_argument("zarr_id", metavar="ZARR_ID")
    parser.add_argument("dest", metavar="DEST", help="the local directory (created if needed)")
    parser.add_argument("--path", default="", help="download only this directory of the archive")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="download only the files this pattern selects (repeatable: any of them). A path "
        "from the archive's root; * and ? within a name, ** any number of directories; a "
        "pattern naming a directory takes everything under it. Each file is verified against "
        "the server's md5; the tree checksum is not (a part cannot prove it)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out the files this pattern selects (repeatable), even if included",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    progress = make_progress(args, "download")
    with json_errors(args), client_errors(), make_client(args) as client:
        result = client.download(
            args.zarr_id,
            args.dest,
            prefix=args.path,
            progress=progress,
            include=args.include,
            exclude=args.exclude,
        )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.summary())
    if not result.ok:
        print(
            f"dandizarr: checksum mismatch: the server holds {result.server_checksum}, the "
            f"downloaded files give {result.local_checksum}",
            file=sys.stderr,
        )
        return 1
    return 0
