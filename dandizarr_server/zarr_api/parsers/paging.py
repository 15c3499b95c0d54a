"""Page numbers, page sizes and limits in query strings: the one rule for what they may be.

ASCII digits only (``str.isdigit`` alone takes ``²`` and other digits ``int`` refuses or reads
otherwise), at least 1, capped at ``maximum``; anything else a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping

from dandizarr_server.zarr_api.exceptions import ValidationFailed


def positive_int(raw: str | None, name: str, default: int, maximum: int) -> int:
    """``raw`` (a query parameter named ``name``) as a whole number from 1, at most
    ``maximum``; ``default`` when absent; ValidationFailed when it is anything else."""
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValidationFailed(f"{name} must be a positive integer, got {raw!r}")
    return min(int(raw), maximum)


def query_positive_int(query: Mapping[str, str], name: str, default: int, maximum: int) -> int:
    return positive_int(query.get(name), name, default, maximum)
