"""``dandizarr ls``: list a directory of a zarr archive with sizes and digests."""

from __future__ import annotations

import argparse
import json

from dandizarr.commands import Subparsers
from dandizarr.commands.connection import add_connection_arguments, client_errors, make_client


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list a directory of a zarr archive with sizes and digests",
        description="List PATH (a directory or a file; default: the root) of the archive "
        "ZARR_ID: one line per entry with its size, digest and name (directories end in /).",
    )
    parser.add_argument("zarr_id", metavar="ZARR_ID")
    parser.add_argument("path", metavar="PATH", nargs="?", default="")
    parser.add_argument(
        "-r", "--recursive", action="store_true", help="every file below PATH, by full path"
    )
    add_connection_arguments(parser, jobs=False)
    parser.set_defaults(func=run)


def _line(size: int, digest: str | None, name: str) -> str:
    return f"{size:>14,}  {digest or '-':<44}  {name}"


def run(args: argparse.Namespace) -> int:
    with client_errors(), make_client(args) as client:
        if args.recursive:
            files = client.iter_files(args.zarr_id, args.path)
            if args.json:
                rows = [{"path": f.path, "size": f.size, "digest": f.digest} for f in files]
                print(json.dumps(rows, indent=2))
            else:
                for f in files:
                    print(_line(f.size, f.digest, f.path))
            return 0
        node = client.stat(args.zarr_id, args.path)
        if node.get("type") == "file":
            if args.json:
                print(json.dumps(node, indent=2))
            else:
                print(_line(node["size"], node["digest"], node["path"]))
            return 0
        entries = list(client.iter_directory(args.zarr_id, args.path))
        if args.json:
            print(
                json.dumps(
                    {
                        "path": node.get("path", args.path),
                        "digest": node.get("digest"),
                        "size": node.get("size"),
                        "file_count": node.get("file_count"),
                        "entries": [e.__dict__ for e in entries],
                    },
                    indent=2,
                )
            )
            return 0
        for entry in entries:
            suffix = "/" if entry.type == "directory" else ""
            print(_line(entry.size, entry.digest, entry.name + suffix))
    return 0
