"""Users and their API tokens without a Python shell (docs/deploying.md, "Users and tokens"):

    manage.py users add alice [--email a@example.org] [--staff]
    manage.py users own alice 000001        (and: users disown alice 000001)
    manage.py users token issue alice [--file PATH | --print]
    manage.py users token revoke alice

A token is written to a file readable by this account alone (``DATA_DIR/tokens/<user>`` unless
``--file`` says where) and printed only with ``--print``: this command's output is a container's
log under compose, which others may read and which is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from dandizarr_server.embedded import write_private_file
from dandizarr_server.zarr_api.management.command_errors import refusals_as_command_errors
from dandizarr_server.zarr_api.selectors.accounts import dandiset_named, user_named
from dandizarr_server.zarr_api.services.accounts import (
    dandiset_owner_add,
    dandiset_owner_remove,
    token_issue,
    token_revoke,
    user_add,
)

TOKENS_DIRECTORY = "tokens"


class Command(BaseCommand):
    help = "Add users, make them owners of dandisets, issue and revoke their API tokens."

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = actions.add_parser("add", help="add a user (no password: they use a token)")
        add.add_argument("username")
        add.add_argument("--email", default="")
        add.add_argument("--staff", action="store_true", help="may read and change everything")
        for name, text in [("own", "make USERNAME an owner of DANDISET"), ("disown", None)]:
            owner = actions.add_parser(
                name, help=text or "USERNAME is no longer an owner (their open uploads end)"
            )
            owner.add_argument("username")
            owner.add_argument("dandiset", help="its six-digit identifier, e.g. 000001")
        token = actions.add_parser("token", help="issue or revoke a user's API token")
        verbs = token.add_subparsers(dest="verb", required=True, metavar="issue|revoke")
        issue = verbs.add_parser("issue", help="a new token (the old one stops working)")
        issue.add_argument("username")
        where = issue.add_mutually_exclusive_group()
        where.add_argument(
            "--file", type=Path, help=f"write it here (default: DATA_DIR/{TOKENS_DIRECTORY}/USER)"
        )
        where.add_argument("--print", action="store_true", help="print it instead (a leak in logs)")
        revoke = verbs.add_parser("revoke", help="delete the user's token")
        revoke.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        with refusals_as_command_errors():
            self.stdout.write(self._run(options))

    def _run(self, options: dict[str, Any]) -> str:
        action, username = options["action"], options["username"]
        if action == "add":
            user = user_add(username=username, email=options["email"], staff=options["staff"])
            role = "staff user" if user.is_staff else "user"
            return f"added {role} {user.username}"
        user = user_named(username)
        if action in {"own", "disown"}:
            dandiset = dandiset_named(options["dandiset"])
            if action == "own":
                dandiset_owner_add(user=user, dandiset=dandiset)
                return f"{user.username} owns dandiset {dandiset.identifier}"
            dandiset_owner_remove(user=user, dandiset=dandiset)
            return f"{user.username} no longer owns dandiset {dandiset.identifier}"
        # The file a token is written to by default: never left holding a dead token.
        default = settings.DATA_DIR / TOKENS_DIRECTORY / user.username
        if options["verb"] == "revoke":
            default.unlink(missing_ok=True)
            if token_revoke(user=user):
                return f"revoked the token of {user.username}"
            return f"{user.username} had no token"
        key = token_issue(user=user).key
        path = None if options["print"] else options["file"] or default
        if path != default:
            default.unlink(missing_ok=True)  # the old token it held stopped working
        if path is None:
            return key
        write_private_file(path, key)
        return f"token of {user.username}: in {path} (readable by this account alone)"
