"""Boolean query parameters (``?embargo=true``): the one rule for what they may say."""

from __future__ import annotations

from rest_framework.request import Request

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed

TRUE = frozenset({"1", "true", "yes"})
FALSE = frozenset({"0", "false", "no", ""})


def parse_flag(request: Request, name: str) -> bool:
    """The query parameter ``name`` as a boolean (absent: false); 400 for anything else."""
    raw = request.query_params.get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in TRUE | FALSE:
        raise ValidationFailed(f"{name} must be true or false, got {raw!r}")
    return value in TRUE
