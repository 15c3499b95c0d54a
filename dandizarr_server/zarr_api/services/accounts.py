"""Accounts an operator manages (``manage.py users``; the admin does the same through Django's
user, dandiset and token pages): adding a user, making them an owner of a dandiset or not,
issuing and revoking their API token (DRF's authtoken: one token per user)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from rest_framework.authtoken.models import Token

from dandizarr_server.zarr_api.edge.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import Dandiset


def user_add(*, username: str, email: str = "", staff: bool = False) -> User:
    """A new user with no password (the API takes their token; ``manage.py changepassword``
    gives one for the admin). An existing username is a Conflict, never a change to them."""
    model = get_user_model()
    try:
        model.username_validator(username)
    except ValidationError as error:
        raise ValidationFailed(f"username {username!r}: {' '.join(error.messages)}") from error
    try:
        with transaction.atomic():
            user = model(username=username, email=email, is_staff=staff)
            user.set_unusable_password()
            user.save()
    except IntegrityError as error:
        raise Conflict(f"user {username!r} exists") from error
    return user


def dandiset_owner_add(*, user: User, dandiset: Dandiset) -> None:
    dandiset.owners.add(user)


def dandiset_owner_remove(*, user: User, dandiset: Dandiset) -> None:
    """No longer an owner: their open uploads in its archives end once this commits
    (``services.lost_writers``, through the owners relation's signal)."""
    dandiset.owners.remove(user)


def token_issue(*, user: User) -> Token:
    """A new token for ``user``; the one they had stops working at once."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        return Token.objects.create(user=user)


def token_revoke(*, user: User) -> bool:
    """``user``'s token deleted; False when they had none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0
