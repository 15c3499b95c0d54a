"""Create the admin user, its API token and its password on first start; write them to files
(0600) in the data directory and print where they are (never the secrets themselves)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from dandizarr_server.embedded import ADMIN_TOKEN_FILE, write_private_file

ADMIN_USERNAME = "admin"
PASSWORD_FILE = "admin-password"


class Command(BaseCommand):
    help = (
        "Create the 'admin' superuser with an API token and a password if missing; write both "
        "to files (mode 0600) in the data directory."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=ADMIN_USERNAME, defaults={"is_staff": True, "is_superuser": True}
        )
        token, _ = Token.objects.get_or_create(user=user)
        token_path = settings.DATA_DIR / ADMIN_TOKEN_FILE
        write_private_file(token_path, token.key)
        password_path = settings.DATA_DIR / PASSWORD_FILE
        new_password = None
        if created or not user.has_usable_password():
            # First start (or an admin made before passwords were given out): a way into /admin/.
            new_password = secrets.token_urlsafe(18)
            write_private_file(password_path, new_password)  # first: never a password unsaved
            user.set_password(new_password)
            user.save(update_fields=["password"])
        # Where the secrets are, never the secrets: this output is the container's log under
        # compose (and make serve's terminal), which others may read and which is kept.
        # It starts nothing itself: ``dandizarr serve`` calls it as it starts, compose's web
        # service before gunicorn, an operator once after migrating (docs/deploying.md).
        self.stdout.write(f"the service's address: {settings.PUBLIC_URL}/")
        self.stdout.write(f"admin API token: in {token_path} (readable by this account alone)")
        if new_password is not None:
            password = f"a new password in {password_path} (readable by this account alone)"
        elif password_path.exists():
            password = f"password in {password_path}"
        else:
            password = "password set earlier"
        self.stdout.write(
            f"admin login at {settings.PUBLIC_URL}/admin/: user {ADMIN_USERNAME}, {password}; "
            f"change it with: django-admin changepassword {ADMIN_USERNAME} (in a checkout: "
            f"python manage.py changepassword {ADMIN_USERNAME})"
        )
        self.stdout.write(
            f'try: curl -H "Authorization: Token $(cat {token_path})" '
            f"{settings.PUBLIC_URL}/api/info/"
        )
