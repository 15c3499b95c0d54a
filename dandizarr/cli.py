"""The ``dandizarr`` command line: one subcommand per module in ``dandizarr.commands``.

Each command module exposes ``register(subparsers)`` (adds its parser and sets ``func``)
and is imported lazily enough that ``dandizarr checksum`` never loads Django.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dandizarr import __version__

COMMAND_MODULES = (
    "dandizarr.commands.serve",
    "dandizarr.commands.checksum",
    "dandizarr.commands.upload",
    "dandizarr.commands.download",
    "dandizarr.commands.ls",
    "dandizarr.commands.convert",
)


class CommandError(Exception):
    """A user-facing error: printed as ``dandizarr: <message>``, exit status 1 or given."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dandizarr", description="Zarr archives in object storage with a verifiable tree hash."
    )
    parser.add_argument("--version", action="version", version=f"dandizarr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
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
    # Run the imported module's main, so commands raise the same CommandError class it catches.
    from dandizarr.cli import main as imported_main

    sys.exit(imported_main())
