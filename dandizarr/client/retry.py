"""When and how long to retry: connection errors, 5xx and 429, with capped exponential backoff.

One policy serves the service's API and the presigned storage URLs; the callers decide what
to do beyond it (an expired URL, for instance, needs a fresh batch, not another try).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import requests

from dandizarr.client.errors import TransientError

# Statuses that say "try again later" rather than "this request is wrong".
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

TRANSIENT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)


# 5xx statuses that say "this will not work again soon": storage full (507), a method or
# version the server will never take (501, 505). Retrying them only delays the error.
FINAL_SERVER_STATUSES = frozenset({501, 505, 507})


def is_transient_status(status: int) -> bool:
    if status in FINAL_SERVER_STATUSES:
        return False
    return status in TRANSIENT_STATUSES or 500 <= status < 600


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    # Tries in all, the first included.
    attempts: int = 8
    backoff: float = 0.2
    max_backoff: float = 20.0
    # Each delay is spread by up to this fraction so that many workers do not retry in step.
    jitter: float = 0.25
    # A server's Retry-After is honoured up to this many seconds.
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def delay(self, retry_number: int, retry_after: float | None = None) -> float:
        """Seconds before retry ``retry_number`` (1 for the first retry)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        base = min(self.max_backoff, self.backoff * (2 ** (retry_number - 1)))
        return base * (1 + random.uniform(-self.jitter, self.jitter))


class RetryCounter:
    """Counts retries across threads (for the summary); ``+=`` under the GIL is not atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.count += n


def request_with_retry(
    session: requests.Session,
    method: str,
    url: str,
    policy: RetryPolicy,
    *,
    counter: RetryCounter | None = None,
    body_factory: Callable[[], Any] | None = None,
    **kwargs: Any,
) -> requests.Response:
    """Send the request, retrying transient failures; the last response is returned as is.

    ``body_factory`` makes a fresh body for each try (a stream cannot be sent twice).
    Raises TransientError when the last try failed with a connection error, or when every
    try answered with a transient status.
    """
    last_error: BaseException | None = None
    response: requests.Response | None = None
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            retry_after = (
                parse_retry_after(response.headers.get("Retry-After"))
                if response is not None
                else None
            )
            if counter is not None:
                counter.add()
            policy.sleep(policy.delay(attempt - 1, retry_after))
        if body_factory is not None:
            kwargs["data"] = body_factory()
        try:
            response = session.request(method, url, **kwargs)
        except TRANSIENT_EXCEPTIONS as error:
            last_error, response = error, None
            continue
        if not is_transient_status(response.status_code):
            return response
        last_error = None
        response.close()
    host = urlparse(url).netloc
    if response is not None:
        raise TransientError(
            f"{method} {host} kept failing: HTTP {response.status_code} "
            f"after {policy.attempts} tries"
        )
    raise TransientError(
        f"{method} {host} kept failing after {policy.attempts} tries: {last_error}"
    )
