"""PUTs to presigned storage URLs: a local file (read again and checked against the md5 it was
hashed with) or any body with a known md5, sent with its ``Content-MD5`` and retried when the
failure is transient. What storage answered becomes a ``PutOutcome``."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import requests

from dandizarr.client.api import ApiClient
from dandizarr.client.digests import content_md5
from dandizarr.client.errors import TransientError
from dandizarr.client.results import UploadResult
from dandizarr.client.retry import request_with_retry
from dandizarr.client.upload_types import LocalFile

# Files up to this size are read whole (hashed before the PUT, so a changed file is never
# sent); larger ones are streamed and hashed while sent.
STREAM_THRESHOLD = 16 << 20

_Item = TypeVar("_Item")
# A PUT's body: bytes, or a file-like object requests streams.
Body = bytes | BinaryIO


class PutStatus(Enum):
    OK = "ok"
    CHANGED = "changed"  # the file on disk is no longer what was hashed
    EXPIRED = "expired"  # storage refused the URL: a fresh batch is needed
    FAILED = "failed"  # any other error, after retries
    ABORTED = "aborted"  # not tried: the batch is being abandoned


@dataclass(frozen=True)
class PutOutcome(Generic[_Item]):
    entry: _Item  # a LocalFile, or a shard of a pack batch
    status: PutStatus
    error: str = ""


class FileChangedError(Exception):
    pass


class HashingReader:
    """A file body for a streamed PUT that hashes what it sends and stops at the declared size."""

    def __init__(self, path: Path, size: int) -> None:
        self._file = path.open("rb")
        self._remaining = size
        self._size = size
        self.md5 = hashlib.md5()

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._remaining <= 0:
            self._file.close()
            return b""
        n = self._remaining if n is None or n < 0 else min(n, self._remaining)
        data = self._file.read(n)
        if not data:
            self._file.close()
            raise FileChangedError("the file is shorter than when it was hashed")
        self._remaining -= len(data)
        self.md5.update(data)
        return data

    def close(self) -> None:
        self._file.close()


def _storage_refused(response: requests.Response) -> bool:
    """Storage turned the URL down as such (expired, or signed wrongly), not the body."""
    if response.status_code == 403:
        return True
    return response.status_code == 400 and "expired" in response.text.lower()


def _bad_digest(response: requests.Response) -> bool:
    return response.status_code == 400 and (
        "BadDigest" in response.text or "InvalidDigest" in response.text
    )


def refused(item: _Item, response: requests.Response) -> PutOutcome[_Item]:
    """The outcome of a PUT storage did not accept."""
    if _bad_digest(response):
        # What was read matched the hash, so storage got other bytes than were sent.
        return PutOutcome(
            item, PutStatus.FAILED, f"storage saw a different md5: HTTP {response.status_code}"
        )
    text = response.text.strip().replace("\n", " ")[:200]
    if _storage_refused(response):
        return PutOutcome(item, PutStatus.EXPIRED, f"HTTP {response.status_code}: {text}")
    return PutOutcome(item, PutStatus.FAILED, f"HTTP {response.status_code}: {text}")


class StoragePuts:
    """The PUTs of one upload, through the client's storage session (never with the token).

    ``aborted`` is set when the upload is being abandoned: PUTs not begun by then are not tried.
    Each PUT sent is counted in ``result.put_requests``.
    """

    def __init__(self, client: ApiClient, result: UploadResult) -> None:
        self.client = client
        self.result = result
        self.aborted = threading.Event()
        self._lock = threading.Lock()

    def send(self, url: str, md5_hex: str, body_factory: Callable[[], Body]) -> requests.Response:
        """One presigned PUT with its Content-MD5, retried when transient (a fresh body each
        try)."""
        response = request_with_retry(
            self.client.storage_session,
            "PUT",
            url,
            self.client.retry,
            counter=self.client.retries,
            body_factory=body_factory,
            headers={
                "Content-MD5": content_md5(md5_hex),
                "Content-Type": "application/octet-stream",
            },
            timeout=self.client.timeout,
        )
        with self._lock:
            self.result.put_requests += 1
        return response

    def put_file(self, root: Path, entry: LocalFile, url: str) -> PutOutcome[LocalFile]:
        """PUT one local file, unless it no longer has the md5 it was hashed with (CHANGED)."""
        if self.aborted.is_set():
            return PutOutcome(entry, PutStatus.ABORTED)
        full = root / entry.path
        reader: HashingReader | None = None
        body_factory: Callable[[], Body]
        try:
            if entry.size <= STREAM_THRESHOLD:
                data = full.read_bytes()
                if len(data) != entry.size or hashlib.md5(data).hexdigest() != entry.md5:
                    return PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")

                def body_factory() -> Body:
                    return data
            else:

                def body_factory() -> Body:
                    nonlocal reader
                    if reader is not None:
                        reader.close()
                    reader = HashingReader(full, entry.size)
                    return reader  # type: ignore[return-value]  # read() is all requests needs
        except FileNotFoundError:
            return PutOutcome(entry, PutStatus.CHANGED, "deleted")
        except OSError as error:
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        try:
            response = self.send(url, entry.md5, body_factory)
        except FileChangedError as error:
            return PutOutcome(entry, PutStatus.CHANGED, str(error))
        except TransientError as error:
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        except requests.RequestException as error:
            if isinstance(error.__context__, FileChangedError):
                return PutOutcome(entry, PutStatus.CHANGED, str(error.__context__))
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        finally:
            if reader is not None:
                reader.close()
        if reader is not None and reader.md5.hexdigest() != entry.md5:
            return PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")
        if response.ok:
            return PutOutcome(entry, PutStatus.OK)
        return refused(entry, response)
