"""Who may see and who may change a dandiset and its archives: the one home of both rules.

Reading: an open dandiset, everyone; a private (embargoed) one, its owners and staff alone.
Every read looks its rows up through ``dandizarr_server.zarr_api.selectors.lookups``, which asks
``user_can_read`` (or filters lists with ``readable_dandisets``): a private row is absent to
everyone else, with the very answer an absent row gets, so nothing confirms it exists.

Writing: owners and staff (``require_writer``), checked after the row was found readable; a
write session, its own writer (``require_session_writer``).
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, Q

from dandizarr_server.zarr_api.edge.exceptions import Forbidden
from dandizarr_server.zarr_api.models import Dandiset, WriteSession

# Whoever made the request: a user, or anonymous.
Requester = AbstractBaseUser | AnonymousUser


def _is_staff(user: Requester | None) -> bool:
    return bool(user and user.is_authenticated and getattr(user, "is_staff", False))


def user_can_write(user: Requester | None, dandiset: Dandiset) -> bool:
    if not user or not user.is_authenticated:
        return False
    if _is_staff(user):
        return True
    return dandiset.owners.filter(pk=user.pk).exists()


def user_can_read(user: Requester | None, dandiset: Dandiset) -> bool:
    return not dandiset.is_private or user_can_write(user, dandiset)


def readable_dandisets(user: Requester | None, prefix: str = "") -> Q:
    """The rows ``user`` may read, as a filter on dandisets (``prefix``: the path from the
    filtered model to its dandiset, e.g. ``"dandiset__"`` for archives). Ownership is an
    EXISTS, not a join: a join on owners would repeat a row per owner."""
    if _is_staff(user):
        return Q()
    visible = Q(**{f"{prefix}embargo_status": Dandiset.EmbargoStatus.OPEN})
    if user and user.is_authenticated:
        owners = Dandiset.owners.through.objects.filter(
            dandiset_id=OuterRef(f"{prefix}pk"), user_id=user.pk
        )
        visible |= Q(Exists(owners))
    return visible


def require_writer(user: Requester | None, dandiset: Dandiset) -> None:
    if not user_can_write(user, dandiset):
        raise Forbidden(f"only owners of dandiset {dandiset.identifier} (or staff) may do this")


def require_session_writer(user: Requester | None, session: WriteSession) -> None:
    """A write session is its writer's (every process writing with the writer's token), or
    staff's; checked after ``require_writer``."""
    if not _is_staff(user) and session.user_id != getattr(user, "pk", None):
        raise Forbidden(f"write session {session.session_id} is another user's")


def recorded_user(user: Requester | None) -> User | None:
    """The user to record on a row (None for anonymous and system work)."""
    return user if isinstance(user, User) else None
