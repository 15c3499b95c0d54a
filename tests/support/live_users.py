"""A user with a token and a dandiset of theirs, made on a live service (the test database)."""

from __future__ import annotations

import requests


def user_with_dandiset(url: str, username: str, dandiset_name: str) -> tuple[str, str]:
    """``(token, dandiset identifier)`` of a new user who created a dandiset at ``url``."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user(username=username)
    token = Token.objects.create(user=user).key
    response = requests.post(
        f"{url}/api/dandisets/",
        json={"name": dandiset_name},
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return token, str(response.json()["identifier"])
