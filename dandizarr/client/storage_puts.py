"""PUTs to presigned storage URLs: a local file (read again and checked against the md5 it was
hashed with) or any body with a known md5, sent with its ``Content-MD5`` and retried as the
client's one retry policy (``dandizarr.client.retry``) says. What storage answered becomes a
``PutOutcome``."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Generic, Protocol, TypeVar

import requests

from dandizarr.client.api import ApiClient
from dandizarr.client.curl_transfers import CurlTransfers, Reply, Transfer
from dandizarr.client.digests import content_md5
from dandizarr.client.results import UploadResult
from dandizarr.client.retry import Attempts, final_status_message
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
        # Opened at the first read: a batch's readers are made together, sent a few at a time.
        self._path = path
        self._file: BinaryIO | None = None
        self._remaining = size
        self._size = size
        self.md5 = hashlib.md5()

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._file is None:
            self._file = self._path.open("rb")
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
        if self._file is not None:
            self._file.close()


class HttpReply(Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...


def _storage_refused(response: HttpReply) -> bool:
    """Storage turned the URL down as such (expired, or signed wrongly), not the body."""
    if response.status_code == 403:
        return True
    return response.status_code == 400 and "expired" in response.text.lower()


def _bad_digest(response: HttpReply) -> bool:
    return response.status_code == 400 and (
        "BadDigest" in response.text or "InvalidDigest" in response.text
    )


def refused(item: _Item, response: HttpReply) -> PutOutcome[_Item]:
    """The outcome of a PUT storage did not accept."""
    if _bad_digest(response):
        # What was read matched the hash, so storage got other bytes than were sent.
        return PutOutcome(
            item, PutStatus.FAILED, f"storage saw a different md5: HTTP {response.status_code}"
        )
    text = response.text.strip().replace("\n", " ")[:200]
    if _storage_refused(response):
        return PutOutcome(item, PutStatus.EXPIRED, f"HTTP {response.status_code}: {text}")
    if response.status_code == 507:
        return PutOutcome(item, PutStatus.FAILED, final_status_message(507, storage_error(text)))
    return PutOutcome(item, PutStatus.FAILED, final_status_message(response.status_code, text))


def storage_error(body: str) -> str:
    """``Code: Message`` of an S3-style XML error body, or the body's start."""
    code = re.search(r"<Code>([^<]*)</Code>", body)
    message = re.search(r"<Message>([^<]*)</Message>", body)
    if code is None:
        return body.strip()[:200]
    return f"{code.group(1)}: {message.group(1)}" if message else code.group(1)


class StoragePuts:
    """The PUTs of one upload, through the client's storage session (never with the token).

    ``aborted`` is set when the upload is being abandoned: PUTs not begun by then are not tried.
    Each PUT sent is counted in ``result.put_requests``.
    """

    def __init__(self, client: ApiClient, result: UploadResult, jobs: int) -> None:
        self.client = client
        self.result = result
        self.aborted = threading.Event()
        self._lock = threading.Lock()
        self._transfers = CurlTransfers(jobs, client.timeout)

    def close(self) -> None:
        self._transfers.close()

    def put_files(
        self,
        root: Path,
        entries: Sequence[LocalFile],
        urls: Sequence[str],
        on_ok: Callable[[LocalFile], None] = lambda entry: None,
    ) -> list[PutOutcome[LocalFile]]:
        """PUT many local files at once (``jobs`` in flight, from this thread), each unless it
        no longer has the md5 it was hashed with (CHANGED); failures are tried again as the
        client's retry policy says, as ``send``'s are. ``on_ok`` is called as each one is stored."""
        files = _Files(root, list(entries), list(urls), on_ok)
        files.grow(len(entries))
        self._put_rounds(files, _given(len(entries)))
        return files.final()

    def put_stream(
        self,
        root: Path,
        feed: FileFeed,
        on_ok: Callable[[LocalFile], None] = lambda entry: None,
    ) -> tuple[list[LocalFile], list[str], list[PutOutcome[LocalFile]]]:
        """``put_files`` of files whose URLs arrive while the first ones are sent: ``feed``
        hands over ``(files, urls)`` as they come, and no PUT waits for the last of them.
        Returns every file handed over, its URL and its outcome, in the order handed over."""
        files = _Files(root, [], [], on_ok)

        def take(wait: float) -> list[int] | None:
            handed = feed.take(wait)
            if handed is None:
                return None
            first = len(files.entries)
            files.entries.extend(handed.files)
            files.urls.extend(handed.urls)
            files.grow(len(handed.files))
            if handed.bodies is not None:
                files.read_ahead.update(enumerate(handed.bodies, start=first))
            return list(range(first, len(files.entries)))

        self._put_rounds(files, take)
        return files.entries, files.urls, files.final()

    def _put_rounds(self, files: _Files, take: Callable[[float], list[int] | None]) -> None:
        """The files ``take`` hands over, then rounds of those the retry policy tries again,
        after the longest of their waits (many PUTs in flight from one thread: the engine's
        rounds are the loop, each file's ``Attempts`` the decisions)."""
        waits = self._put_round(files, take)
        while waits:
            self.client.retry.sleep(max(waits.values()))
            waits = self._put_round(files, _given(list(waits)))

    def _put_round(
        self, files: _Files, take: Callable[[float], list[int] | None]
    ) -> dict[int, float]:
        """One try of the files ``take`` hands over (by position in ``files.entries``);
        returns those to try again, each with its wait."""
        root, entries, urls = files.root, files.entries, files.urls
        outcomes, tries, on_ok = files.outcomes, files.tries, files.on_ok
        sending: list[int] = []
        readers: dict[int, HashingReader] = {}

        class Transfers:  # the engine's feed: the files handed over, as PUTs
            def take(self, wait: float) -> list[Transfer] | None:
                handed = take(wait)
                if handed is None:
                    return None
                transfers: list[Transfer] = []
                for i in handed:
                    entry = entries[i]
                    body = files.read_ahead.pop(i, None)
                    if body is None:  # not read ahead (an empty file's b"" was)
                        body = file_body(root, entry)
                    if isinstance(body, PutOutcome):
                        outcomes[i] = body
                        continue
                    if isinstance(body, HashingReader):
                        readers[len(sending)] = body
                    sending.append(i)
                    transfers.append(Transfer(urls[i], _put_headers(entry.md5), body, entry.size))
                return transfers

        again: dict[int, float] = {}

        def on_reply(number: int, reply: Reply) -> None:
            i = sending[number]
            entry = entries[i]
            tries[i] += 1
            reader = readers.pop(number, None)
            if reader is not None:
                reader.close()
            if isinstance(reply.reader_error, FileChangedError):
                outcomes[i] = PutOutcome(entry, PutStatus.CHANGED, str(reply.reader_error))
            elif reply.reader_error is not None:
                outcomes[i] = PutOutcome(entry, PutStatus.FAILED, str(reply.reader_error))
            elif not reply.ok and (wait := self._retry_wait(files, i, reply)) is not None:
                again[i] = wait
            elif not reply.ok and files.attempts[i].exhausted:
                why = reply.error or f"HTTP {reply.status}"
                outcomes[i] = PutOutcome(
                    entry, PutStatus.FAILED, f"PUT kept failing after {tries[i]} tries: {why}"
                )
            elif reply.ok and reader is not None and reader.md5.hexdigest() != entry.md5:
                outcomes[i] = PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")
            elif reply.ok:
                outcomes[i] = PutOutcome(entry, PutStatus.OK)
                on_ok(entry)
            else:
                outcomes[i] = refused(entry, reply)

        try:
            self._transfers.run(Transfers(), on_reply, self.aborted.is_set)
        finally:
            for reader in readers.values():  # not begun: the upload is being abandoned
                reader.close()
        with self._lock:
            self.result.put_requests += sum(tries[i] > 0 for i in sending)
        return again

    def _retry_wait(self, files: _Files, i: int, reply: Reply) -> float | None:
        """The retry policy's wait before file ``i`` is sent again after ``reply`` (no answer,
        or an error status), None when it is not to be."""
        attempts = files.attempts.get(i)
        if attempts is None:  # its first failure: most files have none, and no Attempts
            attempts = files.attempts[i] = Attempts(self.client.retry, self.client.retries)
        if reply.status == 0:
            return attempts.next_wait()  # no answer: the engine says why in ``reply.error``
        return attempts.next_wait(status=reply.status, retry_after=reply.headers.get("retry-after"))

    def send(self, url: str, md5_hex: str, body_factory: Callable[[], Body]) -> requests.Response:
        """One presigned PUT with its Content-MD5 through the client's storage session, under
        its retry policy (a fresh body each try)."""
        response = self.client.storage_request(
            "PUT", url, body_factory=body_factory, headers=_put_headers(md5_hex)
        )
        with self._lock:
            self.result.put_requests += 1
        return response


@dataclass
class _Files:
    """The files of one ``put_files``/``put_stream``, by position: their URLs, outcomes and
    tries so far, and bodies read ahead (each used once)."""

    root: Path
    entries: list[LocalFile]
    urls: list[str]
    on_ok: Callable[[LocalFile], None]
    outcomes: list[PutOutcome[LocalFile] | None] = field(default_factory=list)
    tries: list[int] = field(default_factory=list)
    # The retry policy's record of each file that failed at least once.
    attempts: dict[int, Attempts] = field(default_factory=dict)
    read_ahead: dict[int, FileBody] = field(default_factory=dict)

    def grow(self, count: int) -> None:
        self.outcomes.extend([None] * count)
        self.tries.extend([0] * count)

    def final(self) -> list[PutOutcome[LocalFile]]:
        """Each file's outcome; ABORTED for those never tried (the upload is abandoned)."""
        return [
            o if o is not None else PutOutcome(e, PutStatus.ABORTED)
            for o, e in zip(self.outcomes, self.entries, strict=True)
        ]


@dataclass
class Handover:
    """Files, their upload URLs and, where read ahead, their bodies (``file_body``)."""

    files: list[LocalFile]
    urls: list[str]
    bodies: list[FileBody] | None = None


class FileFeed(Protocol):
    """Files and their upload URLs handed over while earlier ones are sent."""

    def take(self, wait: float) -> Handover | None:
        """The next files and URLs, waiting up to ``wait`` seconds for them (an empty
        handover when none came in that time); None when no more will come."""


def _given(todo: int | list[int]) -> Callable[[float], list[int] | None]:
    """A ``take`` handing over the positions ``todo`` (or ``range(todo)``) at once."""
    left: list[int] | None = list(range(todo)) if isinstance(todo, int) else todo

    def take(wait: float) -> list[int] | None:
        nonlocal left
        handed, left = left, None
        return handed

    return take


def _put_headers(md5_hex: str) -> dict[str, str]:
    return {"Content-MD5": content_md5(md5_hex), "Content-Type": "application/octet-stream"}


FileBody = bytes | HashingReader | PutOutcome[LocalFile]


def file_body(root: Path, entry: LocalFile) -> FileBody:
    """A local file's PUT body: read whole and checked against its hash when small, else a
    reader that hashes while it is sent; an outcome when it cannot be sent."""
    full = root / entry.path
    try:
        if entry.size > STREAM_THRESHOLD:
            return HashingReader(full, entry.size)
        with open(full, "rb", buffering=0) as file:  # no pathlib or buffer layers per file
            data = file.readall()
    except FileNotFoundError:
        return PutOutcome(entry, PutStatus.CHANGED, "deleted")
    except OSError as error:
        return PutOutcome(entry, PutStatus.FAILED, str(error))
    if len(data) != entry.size or hashlib.md5(data).hexdigest() != entry.md5:
        return PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")
    return data
