"""The ``dandizarr`` command line: one subcommand per module in ``dandizarr.commands``.

Each command module exposes ``register(subparsers)`` (adds its parser and sets ``func``) and
imports what its work needs when it runs, so that ``dandizarr checksum`` never loads Django
(nor the HTTP client).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from dandizarr import __version__
from dandizarr.commands import checksum, convert, diff, download, ls, upload
from dandizarr.commands.errors import CommandError

COMMAND_MODULES = (checksum, upload, download, ls, diff, convert)
# Subcommands other packages add (``serve``, from ``dandizarr_server``): each entry point of this
# group is a ``register(subparsers)`` function.
PLUGIN_GROUP = "dandizarr.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dandizarr", description="Zarr archives in object storage with a verifiable tree hash."
    )
    parser.add_argument("--version", action="version", version=f"dandizarr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for plugin in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        plugin.load()(subparsers)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except CommandError as error:
        print(f"dandizarr: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("dandizarr: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`dandizarr ls ... | head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
