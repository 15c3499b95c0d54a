"""``dandizarr serve``: migrate, create the admin user and token, run the service under gunicorn.

The client's CLI finds this subcommand through the ``dandizarr.commands`` entry point group
(pyproject.toml), so the client never imports the server: ``register`` needs argparse alone,
and ``run`` loads Django only when the server extra is installed."""

from __future__ import annotations

import argparse
import os
from typing import Any

from dandizarr_server import embedded


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
    try:
        import django  # the server extra: the client's install has no Django
    except ModuleNotFoundError:
        # SystemExit with a message: printed to stderr, exit status 1 (the client's CLI has no
        # error type this package may import).
        raise SystemExit(
            "dandizarr: dandizarr serve needs the server: pip install 'dandizarr[server]'"
        ) from None
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr_server.settings")
    # With no broker, tasks and the periodic sweeps run in threads of the server process.
    os.environ.setdefault("DANDIZARR_TASKS_IN_BACKGROUND", "1")
    embedded.mark_embedded()  # a secret key of its own, kept in the data directory
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
    call_command("migrate", interactive=False, verbosity=0)
    print(f"dandizarr is starting at {settings.PUBLIC_URL}/", flush=True)
    call_command("bootstrap_admin")
    if settings.CELERY_TASK_ALWAYS_EAGER:
        # No Celery beat runs the periodic sweeps: finish what a crash left undone now.
        from dandizarr_server.zarr_api.services.recovery import recover_at_start

        # Inline: the background thread is the worker process's, never this one's (it forks).
        background = settings.DANDIZARR_TASKS_IN_BACKGROUND
        settings.DANDIZARR_TASKS_IN_BACKGROUND = False
        recover_at_start()
        settings.DANDIZARR_TASKS_IN_BACKGROUND = background
    from dandizarr_server import httpserver

    httpserver.run(settings.HOST, settings.PORT)
    return 0
