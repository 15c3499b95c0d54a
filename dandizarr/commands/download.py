"""`dandizarr download` (not implemented yet)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("download", help="(not implemented yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("dandizarr download: not implemented yet")
    return 2
