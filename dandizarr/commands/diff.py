"""``dandizarr diff A[@V] B[@V]``: the files added, modified and deleted from one archive state
to another (a draft, a published version, another archive), from the service's diff route."""

from __future__ import annotations

import argparse
import json

from dandizarr.client.tree_diffs import Diff, resolve_state, service_diff
from dandizarr.commands import Subparsers
from dandizarr.commands.connection import add_connection_arguments, client_errors, make_client


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="what changed between two archive states",
        description="The files added, modified and deleted from FROM to TO: each a zarr id "
        "(its draft) or ZARR_ID@N (its published version N). Computed by the service from the "
        "two .checksum trees, in proportion to the change.",
    )
    parser.add_argument("before", metavar="FROM")
    parser.add_argument("after", metavar="TO")
    add_connection_arguments(parser, jobs=False)
    parser.set_defaults(func=run)


def print_diff(diff: Diff, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(diff.to_json(), indent=2))
        return
    for sign, paths in (("+", diff.added), ("~", diff.modified), ("-", diff.deleted)):
        for path in paths:
            print(f"{sign} {path}")
    print(
        f"{len(diff.added)} added, {len(diff.modified)} modified, {len(diff.deleted)} deleted; "
        f"{diff.bytes_added:,} bytes added, {diff.bytes_deleted:,} bytes deleted"
    )


def run(args: argparse.Namespace) -> int:
    with client_errors(), make_client(args) as client:
        diff = service_diff(
            client, resolve_state(client, args.before), resolve_state(client, args.after)
        )
    print_diff(diff, as_json=args.json)
    return 0
