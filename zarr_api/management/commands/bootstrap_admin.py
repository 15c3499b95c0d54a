"""Create the admin user and its API token on first start; print the URL and the token."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create the 'admin' superuser with an API token if missing; write the token file."

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_unusable_password()
            user.save()
        token, _ = Token.objects.get_or_create(user=user)
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        token_path = settings.DATA_DIR / "admin-token"
        token_path.write_text(token.key + "\n")
        os.chmod(token_path, 0o600)
        self.stdout.write(f"dandizarr is starting at {settings.PUBLIC_URL}/")
        self.stdout.write(f"admin API token: {token.key} (saved in {token_path})")
        self.stdout.write(
            f"try: curl -H 'Authorization: Token {token.key}' {settings.PUBLIC_URL}/api/info/"
        )
