"""The secret of a private read link (docs/embargo.md): what its URL carries, and the one form
the database keeps (its sha256), so that no row, backup or query log can open an archive."""

from __future__ import annotations

import hashlib
import re
import secrets

# 32 random bytes, URL-safe base64 without padding: 43 characters.
SECRET_BYTES = 32
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
# Where a link's reads live, outside /zarr/ and /api/: no archive path can shadow it.
PREFIX = "links/"


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def secret_hash(secret: str) -> str | None:
    """The sha256 a link with ``secret`` is stored under; None for what no link can carry."""
    if _SECRET.fullmatch(secret) is None:
        return None
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


# Any secret-length run after the prefix (a truncated or altered secret is redacted too).
_IN_TEXT = re.compile(r"(/" + PREFIX + r")[A-Za-z0-9_-]{20,}")


def redact(text: str) -> str:
    """``text`` with every link secret in it replaced (log lines, tracebacks)."""
    return _IN_TEXT.sub(r"\1[redacted]", text)
