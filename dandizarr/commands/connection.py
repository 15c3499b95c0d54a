"""What the commands that talk to a service share: the ``--server``/``--token``/``--jobs``/
``--json`` options, making the client and the progress display, and turning client errors
into ``CommandError``.

The client (requests, numpy) is imported when a command runs, not when the parser is built,
so that ``dandizarr --help`` and ``dandizarr checksum`` start without it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from dandizarr.commands.errors import CommandError

if TYPE_CHECKING:
    from dandizarr.client import DandizarrClient
    from dandizarr.client.progress import Progress

# The client's DEFAULT_JOBS (dandizarr.client.api_connection), repeated so that building the
# parser imports no client (`dandizarr --help` stays fast); tests/client/test_cli_args.py checks
# that the two agree.
DEFAULT_JOBS = 32


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_connection_arguments(parser: argparse.ArgumentParser, *, jobs: bool = True) -> None:
    parser.add_argument(
        "--server",
        metavar="URL",
        help="the service's URL (default: $DANDIZARR_URL or http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--token", help="API token (default: $DANDIZARR_TOKEN); needed to change archives"
    )
    if jobs:
        parser.add_argument(
            "-j",
            "--jobs",
            type=positive_int,
            default=DEFAULT_JOBS,
            help=f"parallel transfers (default: {DEFAULT_JOBS})",
        )
    parser.add_argument(
        "--json", action="store_true", help="print a machine-readable summary (JSON) on stdout"
    )


def make_client(args: argparse.Namespace) -> DandizarrClient:
    from dandizarr.client import DandizarrClient

    return DandizarrClient.from_env(args.server, args.token, jobs=getattr(args, "jobs", 8))


def make_progress(args: argparse.Namespace, description: str) -> Progress:
    from dandizarr.client.progress import MessageProgress, TqdmProgress

    if args.json or getattr(args, "no_progress", False) or not sys.stderr.isatty():
        return MessageProgress()
    return TqdmProgress(description)


@contextmanager
def client_errors() -> Iterator[None]:
    """Client errors become ``dandizarr: <message>`` (naming the flags that remedy them);
    SIGTERM unwinds like Ctrl-C, so an open batch is cancelled on the way out."""
    from dandizarr.client.errors import ClientError
    from dandizarr.commands.client_messages import command_line_message

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except ClientError as error:
        raise CommandError(command_line_message(error)) from error
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def json_errors(args: argparse.Namespace) -> Iterator[None]:
    """With ``--json``, a failure still prints a JSON object (``ok`` false, ``error``)."""
    try:
        yield
    except CommandError as error:
        if args.json:
            print(json.dumps({"ok": False, "error": str(error)}, indent=2))
        raise
