"""GETs of object bytes without botocore's per-call pipeline, for ``S3ObjectStore``'s reads
(``get_range``, ``read_range``, ``get_version_range``): every chunk a reader asks the service
for is one of these.

boto3's ``get_object`` of a 4 KiB chunk took 0.76 ms of CPU (event hooks, endpoint rules,
parameter validation, signing, parsing); the same GET presigned by ``sigv4`` and sent over the
boto3 client's own HTTP session took 0.36 ms (docs/performance.md, "Chunk reads"). As for
PUTs (``s3_puts``): the connection pool, TLS verification, proxies and timeouts are the
client's, failures are retried as botocore's standard retry mode retries them, and storage's
refusals become the interface's errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, HeadersDict
from botocore.exceptions import ClientError, ConnectionError, HTTPClientError
from botocore.httpsession import URLLib3Session
from urllib3.exceptions import HTTPError

from dandizarr.objectstore.digests import strip_etag
from dandizarr.objectstore.errors import (
    InvalidRange,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
)
from dandizarr.objectstore.s3_puts import Failure, reply_failure, retry_delay


class RangeRefused(InvalidRange):
    """416: S3 refuses a range that starts at or past the end (every range of an empty object
    too); the caller tells the two apart."""


def _client_error(failure: Failure) -> ClientError:
    reply: Any = {
        "Error": {"Code": failure.code, "Message": failure.message},
        "ResponseMetadata": {"HTTPStatusCode": failure.status},
    }
    return ClientError(reply, "GetObject")


def get_object(
    http: URLLib3Session,
    sign: Callable[[], str],
    key: str,
    headers: Mapping[str, str],
    *,
    if_match: str | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> tuple[bytes, str]:
    """GET the URL ``sign()`` gives (a fresh one for every attempt) with ``headers`` (``Range``,
    ``If-Match``: ``if_match``); the body and the object's ETag. Raises ObjectNotFound,
    PreconditionFailed, RangeRefused, or ObjectStoreError naming ``key`` when storage refuses
    or the retries run out."""
    attempt = 0
    while True:
        attempt += 1
        # botocore prepares its requests' headers as a HeadersDict too (the stubs say otherwise).
        request = AWSPreparedRequest(
            "GET",
            sign(),
            HeadersDict(headers),  # type: ignore[arg-type]
            None,
            stream_output=False,
        )
        cause: Exception | None = None
        try:
            response = http.send(request)
            body = response.content
        except (ConnectionError, HTTPClientError) as error:
            failure, cause = Failure(None, type(error).__name__, str(error)), error
        except HTTPError as error:  # the body cut short: as botocore's connection errors
            failure, cause = (
                Failure(None, type(error).__name__, str(error)),
                HTTPClientError(error=error),
            )
        else:
            status = response.status_code
            if status in (200, 206):
                return body, strip_etag(response.headers.get("ETag", ""))
            if status == 404:
                raise ObjectNotFound(key)
            if status == 412:
                raise PreconditionFailed(key, strip_etag(if_match or ""))
            if status == 416:
                raise RangeRefused(f"{key}: range {headers.get('Range')} refused")
            failure = reply_failure(status, body, response.headers)
            # Raised from botocore's error, as boto3's get_object raised it (a 5xx: storage
            # unavailable, zarr_api.edge.exceptions).
            cause = _client_error(failure)
        delay = retry_delay(failure, attempt)
        if delay is None:
            tries = f" ({attempt} attempts)" if attempt > 1 else ""
            raise ObjectStoreError(f"get {key}: {failure}{tries}") from cause
        sleep(delay)
