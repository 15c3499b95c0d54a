"""PUTs of whole objects without botocore's per-call pipeline, for ``S3ObjectStore.put_many``.

boto3 spends milliseconds of CPU under the GIL on each ``put_object`` (event hooks, endpoint
rules, signing, parsing), which a tree update's ``.checksum`` files add up while the client
waits for its checksum (docs/measurements.md). Here a PUT is a URL presigned by ``sigv4``
with Content-MD5 among the signed headers (storage checks the body's digest: BadDigest), sent
over the boto3 client's own HTTP session, so the connection pool, TLS verification, proxies and
timeouts are the client's. Failures are retried as botocore's standard retry mode retries them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from xml.etree import ElementTree

from botocore.awsrequest import AWSPreparedRequest, HeadersDict
from botocore.exceptions import ConnectionError, HTTPClientError
from botocore.httpsession import URLLib3Session

from dandizarr.objectstore.base import ObjectStoreError

# Retries after the first attempt: the boto3 client's ``max_attempts``, which botocore counts
# as retries (a request is tried 6 times).
RETRIES = 5
# Each attempt signs its own URL right before it is sent, so a URL only has to outlive one
# attempt (its connect timeout is 60 s). 15 minutes is the clock skew S3 tolerates in a request
# signed in headers: a server clock behind storage's by a few minutes fails no more PUTs here.
URL_EXPIRES_IN = 900
# Bodies from this size ask for ``100 Continue`` first, as boto3's do (it asks for any size):
# storage's refusal (403, 404) then arrives instead of a connection reset mid-body.
EXPECT_CONTINUE_FROM = 1 << 20

# botocore.retries.standard: the transient and the throttling failures.
_TRANSIENT_STATUSES = frozenset({500, 502, 503, 504})
_TRANSIENT_CODES = frozenset(
    {"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"}
)
_THROTTLING_STATUSES = frozenset({429})
_THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)


@dataclass(frozen=True)
class Failure:
    """An attempt that did not store the object: an error reply, or none (``status`` None)."""

    status: int | None
    code: str
    message: str
    # ``x-amz-retry-after``: the milliseconds storage asks the client to wait.
    retry_after_ms: int | None = None

    def __str__(self) -> str:
        if self.status is None:
            return f"no reply: {self.message}"
        said = f"{self.code} (HTTP {self.status})" if self.code else f"HTTP {self.status}"
        return f"{said}: {self.message}" if self.message else said


def reply_failure(status: int, body: bytes, headers: Mapping[str, str]) -> Failure:
    """The Failure of an error reply, its code and message read from S3's XML error body."""
    try:
        root: ElementTree.Element | None = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        root = None
    code = "" if root is None else (root.findtext("Code") or "").strip()
    if code and root is not None:
        message = (root.findtext("Message") or "").strip()
    else:
        # Not S3's error document (a proxy's page, or no body): its start tells what it was.
        message = body[:200].decode("utf-8", "replace").strip()
    retry_after = headers.get("x-amz-retry-after")
    retry_after_ms = int(retry_after) if retry_after and retry_after.isdigit() else None
    return Failure(status, code, message, retry_after_ms)


def retry_delay(
    failure: Failure, attempt: int, uniform: Callable[[], float] = random.random
) -> float | None:
    """Seconds to wait before trying again after attempt ``attempt`` (1-based) failed so, or
    None when it is not tried again: botocore's standard retry mode. A PUT of the same bytes
    is idempotent, so every transient failure is worth another attempt."""
    if attempt > RETRIES:
        return None
    throttled = failure.code in _THROTTLING_CODES or failure.status in _THROTTLING_STATUSES
    transient = (
        failure.status is None  # no reply: the connection failed, closed or timed out
        or failure.status in _TRANSIENT_STATUSES
        or failure.code in _TRANSIENT_CODES
    )
    if not (throttled or transient):
        return None
    # Truncated binary exponential backoff with full jitter, from 1 s when storage asks for
    # less load and from 50 ms otherwise.
    delay = uniform() * min((1.0 if throttled else 0.05) * 2 ** (attempt - 1), 20.0)
    if failure.retry_after_ms is not None:
        # Storage's own ask is honoured, up to 5 s more than the backoff.
        delay = max(delay, min(failure.retry_after_ms / 1000, delay + 5))
    return delay


def put_object(
    http: URLLib3Session,
    sign: Callable[[], str],
    key: str,
    body: bytes,
    content_md5: str,
    *,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """PUT ``body`` to the URL ``sign()`` gives, a fresh one for every attempt; raises
    ObjectStoreError naming ``key`` when storage refuses or the retries run out."""
    headers = HeadersDict({"Content-MD5": content_md5})
    if len(body) >= EXPECT_CONTINUE_FROM:
        headers["Expect"] = b"100-continue"  # botocore's connection looks for these bytes
    attempt = 0
    while True:
        attempt += 1
        url = sign()
        # botocore prepares its requests' headers as a HeadersDict too (the stubs say otherwise).
        request = AWSPreparedRequest(
            "PUT",
            url,
            headers,  # type: ignore[arg-type]
            body,
            stream_output=False,
        )
        cause: Exception | None = None
        try:
            response = http.send(request)
        except (ConnectionError, HTTPClientError) as error:
            failure, cause = Failure(None, type(error).__name__, str(error)), error
        else:
            if 200 <= response.status_code < 300:
                return
            failure = reply_failure(response.status_code, response.content, response.headers)
        delay = retry_delay(failure, attempt)
        if delay is None:
            tries = f" ({attempt} attempts)" if attempt > 1 else ""
            raise ObjectStoreError(f"put {key}: {failure}{tries}") from cause
        sleep(delay)
