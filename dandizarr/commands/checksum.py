"""`dandizarr checksum` (not implemented yet)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("checksum", help="(not implemented yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("dandizarr checksum: not implemented yet")
    return 2
