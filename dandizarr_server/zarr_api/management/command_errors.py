"""What a management command does with the services' refusals: the one CommandError (its
message and code), as the API answers them with a 4xx."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.base import CommandError

from dandizarr_server.zarr_api.edge.exceptions import DomainError


@contextmanager
def refusals_as_command_errors() -> Iterator[None]:
    try:
        yield
    except DomainError as error:
        raise CommandError(f"{error.message} ({error.code})") from error
