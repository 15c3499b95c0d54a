"""Who may change a dandiset and its archives: its owners, and staff."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User

from zarr_api.exceptions import Forbidden
from zarr_api.models import Dandiset

# Whoever made the request: a user, or anonymous.
Requester = AbstractBaseUser | AnonymousUser


def user_can_write(user: Requester | None, dandiset: Dandiset) -> bool:
    if not user or not user.is_authenticated:
        return False
    if getattr(user, "is_staff", False):
        return True
    return dandiset.owners.filter(pk=user.pk).exists()


def require_writer(user: Requester | None, dandiset: Dandiset) -> None:
    if not user_can_write(user, dandiset):
        raise Forbidden(f"only owners of dandiset {dandiset.identifier} (or staff) may do this")


def recorded_user(user: Requester | None) -> User | None:
    """The user to record on a row (None for anonymous and system work)."""
    return user if isinstance(user, User) else None
