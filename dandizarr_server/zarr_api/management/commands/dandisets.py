"""Dandisets without the API, for an operator (docs/deploying.md, "Users and tokens"):

    manage.py dandisets create "A name" --owner alice [--embargoed]

prints the new dandiset's identifier. On a fresh install there is none: `users own` needs one
to exist, and the API makes one only for a user with a token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dandizarr_server.zarr_api.management.command_errors import refusals_as_command_errors
from dandizarr_server.zarr_api.selectors.accounts import user_named
from dandizarr_server.zarr_api.services.dandisets import dandiset_create


class Command(BaseCommand):
    help = "Create a dandiset owned by a user; prints its identifier."

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser("create", help="a new dandiset (its draft included)")
        create.add_argument("name")
        create.add_argument("--owner", required=True, help="the username of its first owner")
        create.add_argument(
            "--embargoed", action="store_true", help="private until its owners release it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with refusals_as_command_errors():
            owner = user_named(options["owner"])
            dandiset = dandiset_create(
                user=owner, name=options["name"], embargoed=options["embargoed"]
            )
        self.stdout.write(dandiset.identifier)
