"""The rows an operator names on the command line (``manage.py users``): a user by username, a
dandiset by identifier, whoever may read it (the operator is not a requester)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Dandiset
from dandizarr_server.zarr_api.parsers.identifiers import parse_row_id


def user_named(username: str) -> User:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"no user {username!r}")
    return user


def dandiset_named(identifier: str) -> Dandiset:
    pk = parse_row_id(identifier)
    dandiset = Dandiset.objects.filter(pk=pk).first() if pk is not None else None
    if dandiset is None:
        raise NotFound(f"no dandiset {identifier!r}")
    return dandiset
