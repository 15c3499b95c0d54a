"""The client's one retry policy (its one home): which failures of an HTTP request another try
may cure, how long to wait before it, and when to give up.

Every HTTP path of the client goes through it: the service's API (``ApiConnection.request``),
presigned storage PUTs and GETs (``ApiConnection.storage_request``, the libcurl PUT engine of
``storage_puts``, the download's GETs), and ``ArchiveStore``'s reads. The transports differ
(``requests``, libcurl's multi interface, an asyncio loop); what they decide with is this:

* **Retryable**: no answer (connection refused or reset, a timeout, a truncated body), 408,
  425, 429 and every 5xx but 501, 505 and 507.
* **Final** (exactly one try, the error reported as the server gave it): every other status.
  4xx say the request is wrong; 507 says storage is full, which waiting will not change, so it
  is told as such (``final_status_message``), never retried.
* **Waits**: exponential from ``backoff`` doubling to ``max_backoff``, spread by ``jitter``; a
  ``Retry-After`` (seconds or an HTTP date) replaces the backoff, up to ``max_retry_after``.
* **Budget**: ``attempts`` tries in all, and no try starts ``max_elapsed`` seconds or more after
  the first failure.

One request's tries are an ``Attempts``; ``retrying`` and ``retrying_async`` are the loop,
blocking and on an event loop, for a request made by a function that answers or raises
``TryAgain``. The callers decide what to do beyond it (an expired URL needs a fresh one, not
the same one again).
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import random
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlparse

import requests

from dandizarr.client.errors import TransientError

_T = TypeVar("_T")

# 4xx statuses that say "try again later" rather than "this request is wrong".
RETRYABLE_CLIENT_STATUSES = frozenset({408, 425, 429})
# 5xx statuses that say "this will not work again soon": storage full (507), a method or
# version the server will never take (501, 505). Retrying them only delays the error.
FINAL_SERVER_STATUSES = frozenset({501, 505, 507})

# What ``requests`` raises when no (whole) answer came; its other errors (a bad URL, too many
# redirects) are the request's fault.
_REQUESTS_TRANSIENT: tuple[type[BaseException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
# The same from the other transports: sockets refused, reset or timed out, names not resolved,
# TLS broken off, bodies cut short on an event loop. Not any OSError: a local file that cannot
# be read or written is no reason to ask storage again.
_TRANSPORT_TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    ssl.SSLError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
)
_NETWORK_ERRNOS = frozenset(
    {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}
)


def is_transient_status(status: int) -> bool:
    """Whether an answer with ``status`` may be different if asked again."""
    if status in FINAL_SERVER_STATUSES:
        return False
    return status in RETRYABLE_CLIENT_STATUSES or 500 <= status < 600


def is_transient_error(error: BaseException) -> bool:
    """Whether ``error``, raised instead of an answer, may not happen on another try."""
    if isinstance(error, requests.RequestException):
        return isinstance(error, _REQUESTS_TRANSIENT)
    if isinstance(error, ssl.SSLCertVerificationError):
        return False
    if isinstance(error, OSError) and error.errno in _NETWORK_ERRNOS:
        return True
    return isinstance(error, _TRANSPORT_TRANSIENT)


def final_status_message(status: int, detail: str = "") -> str:
    """What a user is told of a final answer: its status and what the server said; for 507,
    that storage is full and what to do about it."""
    if status == 507:
        return (
            f"storage is full (HTTP 507 {detail or 'Insufficient Storage'}); free space on the "
            "server's storage, then run the command again: it resumes"
        )
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status}"


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
    # No try starts this many seconds or more after a request first failed.
    max_elapsed: float = 300.0
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


class Attempts:
    """The tries of one request under ``policy``: after each failed one, ``next_wait`` says
    how long to wait before the next, or that there is to be none (``exhausted`` tells whether
    the failure was retryable and the budget ran out). Each retry granted is counted in
    ``counter``."""

    def __init__(self, policy: RetryPolicy, counter: RetryCounter | None = None) -> None:
        self.policy = policy
        self.counter = counter
        self.tries = 0
        self.exhausted = False
        self._first_failure: float | None = None
        self._waited = 0.0

    def next_wait(
        self,
        *,
        status: int | None = None,
        error: BaseException | None = None,
        retry_after: str | None = None,
        curable: bool = False,
    ) -> float | None:
        """Record a failed try: an answer with ``status`` (and its ``Retry-After``), ``error``
        raised instead of one, neither when the transport only says no answer came, or
        ``curable`` when the caller judged another try may cure it (bytes that arrived
        garbled, a URL it has just renewed). Returns the seconds to wait, None for no retry."""
        self.tries += 1
        now = time.monotonic()
        if self._first_failure is None:
            self._first_failure = now
        if not curable:
            if status is not None and not is_transient_status(status):
                return None
            if error is not None and not is_transient_error(error):
                return None
        wait = self.policy.delay(self.tries, parse_retry_after(retry_after))
        # The time since the first failure, or the waits granted when they were not slept
        # through on this clock (a policy's own ``sleep``).
        elapsed = max(now - self._first_failure, self._waited)
        if self.tries >= self.policy.attempts or elapsed + wait >= self.policy.max_elapsed:
            self.exhausted = True
            return None
        self._waited += wait
        if self.counter is not None:
            self.counter.add()
        return wait

    def gave_up(self, what: str, last: object) -> TransientError:
        """The error of a request whose retries ran out."""
        return TransientError(f"{what} kept failing after {self.tries} tries: {last}")


class TryAgain(Exception):
    """Raised by a try that failed in a way another may cure: a retryable status (see
    ``check_status``), or what the caller judged curable."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def check_status(status: int, retry_after: str | None = None, what: str = "") -> None:
    """Raise TryAgain when an answer's ``status`` is retryable; return when it is final."""
    if is_transient_status(status):
        said = f"HTTP {status}" + (f" ({what})" if what else "")
        raise TryAgain(said, status=status, retry_after=retry_after)


def _wait_after(attempts: Attempts, failure: BaseException) -> float | None:
    if isinstance(failure, TryAgain):
        if failure.status is not None:
            return attempts.next_wait(status=failure.status, retry_after=failure.retry_after)
        return attempts.next_wait(retry_after=failure.retry_after, curable=True)
    return attempts.next_wait(error=failure)


def retrying(
    attempt: Callable[[], _T],
    policy: RetryPolicy,
    *,
    what: str,
    counter: RetryCounter | None = None,
) -> _T:
    """``attempt()`` until it answers: again after the policy's wait when it raises TryAgain
    or a transient error, TransientError once the budget is spent; other errors as raised."""
    attempts = Attempts(policy, counter)
    while True:
        try:
            return attempt()
        except Exception as failure:
            if not isinstance(failure, TryAgain) and not is_transient_error(failure):
                raise
            wait = _wait_after(attempts, failure)
            if wait is None:
                raise attempts.gave_up(what, failure) from failure
        policy.sleep(wait)


async def retrying_async(
    attempt: Callable[[], Awaitable[_T]],
    policy: RetryPolicy,
    *,
    what: str,
    counter: RetryCounter | None = None,
) -> _T:
    """``retrying`` on an event loop: the waits are the loop's (other requests go on)."""
    attempts = Attempts(policy, counter)
    while True:
        try:
            return await attempt()
        except Exception as failure:
            if not isinstance(failure, TryAgain) and not is_transient_error(failure):
                raise
            wait = _wait_after(attempts, failure)
            if wait is None:
                raise attempts.gave_up(what, failure) from failure
        await asyncio.sleep(wait)


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
    """One request over a ``requests`` session under the policy; the answer with a final
    status (a success, or an error for the caller to tell) is returned as is.

    ``body_factory`` makes a fresh body for each try (a stream cannot be sent twice).
    Raises TransientError when the retries ran out.
    """

    def attempt() -> requests.Response:
        if body_factory is not None:
            kwargs["data"] = body_factory()
        response = session.request(method, url, **kwargs)
        if is_transient_status(response.status_code):
            response.close()
        check_status(response.status_code, response.headers.get("Retry-After"))
        return response

    return retrying(attempt, policy, what=f"{method} {urlparse(url).netloc}", counter=counter)
