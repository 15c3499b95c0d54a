"""``ApiConnection``: what every call of ``ApiClient`` goes through, apart from the calls.

Holds the service's address and token, the HTTP sessions, the retry policy
(``dandizarr.client.retry``) and its counter, the translation of error answers into the client's
exceptions (``dandizarr.client.errors``), the service's description (``info``, which the calls
consult for its limits) and the polling loop of the calls that wait for the server. The calls
themselves, grouped by what they act on, are in ``api_archives``, ``api_browsing`` and
``api_batches``; ``ApiClient`` (``dandizarr.client.api``) puts them together.

Two HTTP sessions: one for the service (with the token, ``request``) and one for presigned
storage URLs (never with the token: it is not theirs to see, and S3 rejects a second
authorization; ``storage_request``). Both keep a connection pool as large as the number of
parallel transfers, and both go through the one retry policy. The uploads' and downloads'
engines (libcurl, asyncio) take their decisions from the same policy and counter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

import requests
from requests.adapters import HTTPAdapter

from dandizarr import __version__
from dandizarr.client.errors import (
    OPEN_BATCH_EXISTS,
    ApiError,
    AuthenticationError,
    BatchConflict,
    ClientError,
    Conflict,
    NotFound,
    PermissionDenied,
    code_of,
)
from dandizarr.client.models import ServiceInfo
from dandizarr.client.progress import Progress
from dandizarr.client.retry import (
    RetryCounter,
    RetryPolicy,
    final_status_message,
    request_with_retry,
)

DEFAULT_SERVER = "http://127.0.0.1:8000"
DEFAULT_JOBS = 32
# How long a caller waits for the server to finish work it started (a batch applied, the
# archive's checksum): one home for the client's every wait (upload, the API's waits, the CLI).
DEFAULT_WAIT_SECONDS = 600.0

_Polled = TypeVar("_Polled")


def make_session(pool_size: int, *, agent: str = "dandizarr-client") -> requests.Session:
    """A session with a pool of ``pool_size`` connections and no retries of its own."""
    session = requests.Session()
    # Retries are ours (RetryPolicy), not urllib3's, so they are counted and use fresh bodies.
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = f"{agent}/{__version__}"
    return session


def _body(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        text = response.text.strip()
        return text[:300] + ("..." if len(text) > 300 else "")


def _conflict_class(body: Any) -> type[Conflict]:
    """A 409 is an open batch when its code says so; from a server older than codes (no code),
    the status alone decides, as it did then: any 409 is one."""
    return BatchConflict if code_of(body) in (OPEN_BATCH_EXISTS, None) else Conflict


def poll_until(
    fetch: Callable[[], _Polled],
    done: Callable[[_Polled], bool],
    *,
    timeout: float,
    still: Callable[[_Polled], str],
    waiting: str,
    progress: Progress | None,
) -> _Polled:
    """``fetch()`` until ``done``: every 50 ms for the first second (a tree update after an
    upload usually ends within it, and doubling waits would overshoot it by as much again),
    then backing off to 2 s; ClientError after ``timeout`` (``still`` says what the last
    answer was). ``waiting`` is told once the wait is long."""
    started = time.monotonic()
    deadline = started + timeout
    interval = 0.05
    told = False
    while True:
        answer = fetch()
        if done(answer):
            return answer
        if time.monotonic() >= deadline:
            raise ClientError(
                f"{still(answer)} after {timeout:.0f} s; the server's worker may be down or busy"
            )
        if not told and progress is not None and interval >= 1:
            progress.message(waiting)
            told = True
        time.sleep(interval)
        if time.monotonic() - started >= 1.0:
            interval = min(interval * 2, 2.0)


class ApiConnection:
    """The connection to one dandizarr service's REST API that its calls are built on; the
    arguments are documented on ``ApiClient``, the class that is used."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        token: str | None = None,
        *,
        jobs: int = DEFAULT_JOBS,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.server = server.rstrip("/")
        self.token = token
        self.jobs = jobs
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.retries = RetryCounter()
        self.api_session = make_session(jobs + 4)
        if token:
            self.api_session.headers["Authorization"] = f"Token {token}"
        self.storage_session = make_session(jobs + 4)
        self._info: ServiceInfo | None = None

    @classmethod
    def from_env(
        cls,
        server: str | None = None,
        token: str | None = None,
        *,
        jobs: int = DEFAULT_JOBS,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> Self:
        """Server and token from the arguments, else ``DANDIZARR_URL`` / ``DANDIZARR_TOKEN``."""
        return cls(
            server or os.environ.get("DANDIZARR_URL") or DEFAULT_SERVER,
            token or os.environ.get("DANDIZARR_TOKEN") or None,
            jobs=jobs,
            retry=retry,
            timeout=timeout,
        )

    def close(self) -> None:
        self.api_session.close()
        self.storage_session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.server}{path}"

    def request(
        self, method: str, path: str, *, expect: Sequence[int] = (200,), **kwargs: Any
    ) -> requests.Response:
        """Call the service; transient failures are retried, other errors raised as ApiError."""
        url = self.url(path)
        kwargs.setdefault("timeout", self.timeout)
        try:
            response = request_with_retry(
                self.api_session, method, url, self.retry, counter=self.retries, **kwargs
            )
        except requests.RequestException as error:  # not transient: bad URL, TLS, ...
            raise ClientError(f"cannot reach {self.server}: {error}") from error
        if response.status_code in expect:
            return response
        raise self._error(method, url, response)

    def storage_request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """A presigned storage URL, through the storage session (with the token only to the
        service's own URLs) under the retry policy; the answer with a final status is returned
        for the caller to judge (an expired URL, a missing key). TransientError when the
        retries ran out, ClientError when the request cannot be made at all."""
        kwargs.setdefault("timeout", self.timeout)
        if self.token and url.startswith(self.server + "/"):
            # Not storage but the service itself (a version's file is read through
            # ``/zarr/{version_id}/``): the token goes where the API's does, so that a private
            # archive's reads are the reader's.
            kwargs["headers"] = {
                **(kwargs.get("headers") or {}),
                "Authorization": f"Token {self.token}",
            }
        try:
            return request_with_retry(
                self.storage_session, method, url, self.retry, counter=self.retries, **kwargs
            )
        except requests.RequestException as error:  # not transient: bad URL, TLS, ...
            raise ClientError(f"cannot reach storage: {error}") from error

    def _error(self, method: str, url: str, response: requests.Response) -> ApiError:
        status = response.status_code
        body = _body(response)
        detail = body.get("detail") if isinstance(body, dict) else body
        where = f"{method} {url.removeprefix(self.server)}"
        if status == 401:
            hint = "check the token" if self.token else "no token was given"
            return AuthenticationError(
                f"the server at {self.server} rejected the credentials ({detail}); {hint}",
                status=status,
                method=method,
                url=url,
                body=body,
                server=self.server,
                token_given=bool(self.token),
            )
        classes: dict[int, type[ApiError]] = {
            403: PermissionDenied,
            404: NotFound,
            409: _conflict_class(body),
        }
        error_class = classes.get(status, ApiError)
        message = f"{where}: {final_status_message(status, str(detail))}"
        return error_class(message, status=status, method=method, url=url, body=body)

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    # --- the service -------------------------------------------------------------------------

    def info(self) -> ServiceInfo:
        if self._info is None:
            self._info = ServiceInfo.from_json(self.get_json("/api/info/"))
        return self._info
