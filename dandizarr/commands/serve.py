"""``dandizarr serve``: migrate, create the admin user and token, run the embedded server."""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the service (migrates, creates an admin token on first start)",
        description="Run the service. Host, port and data directory come from DANDIZARR_HOST, "
        "DANDIZARR_PORT and DANDIZARR_DATA_DIR unless given here.",
    )
    parser.add_argument(
        "--host", help="address to listen on (default: $DANDIZARR_HOST or 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, help="port (default: $DANDIZARR_PORT or 8000)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.host:
        os.environ["DANDIZARR_HOST"] = args.host
    if args.port:
        os.environ["DANDIZARR_PORT"] = str(args.port)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr.settings")
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
    call_command("migrate", interactive=False, verbosity=0)
    call_command("bootstrap_admin")
    from dandizarr.httpserver import EmbeddedServerCommand

    # --insecure: the admin's static files are served by this process, as DEBUG would.
    call_command(
        EmbeddedServerCommand(),
        f"{settings.HOST}:{settings.PORT}",
        use_reloader=False,
        insecure_serving=True,
    )
    return 0
