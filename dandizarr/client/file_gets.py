"""One file's bytes from storage, verified before anything is written into place: a single GET
(or a packed file's range of its shard) under the client's retry policy, an expired URL renewed
once, the size and md5 checked against the server's tree; and whether a file already on disk is
that file (a resumed download). ``download.Downloader`` calls these for every file that is not
big enough for ranged GETs (``ranged_gets``)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dandizarr.checksums.local import md5_file
from dandizarr.client.download_files import Body
from dandizarr.client.errors import ClientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.retry import (
    RetryCounter,
    RetryPolicy,
    TryAgain,
    check_status,
    final_status_message,
    retrying_async,
)
from dandizarr.client.storage_gets import Fetch


def temp_path(target: Path, worker: int) -> Path:
    """Where a file is written before it is moved into place: beside it, under a name of fixed
    length (the longest name an archive holds, dandizarr.objectstore.keys.MAX_SEGMENT_BYTES, plus
    any suffix would not fit in a filesystem's 255 bytes), unique to this process, worker and
    file (a digest of its name: a worker has several files of a directory in flight)."""
    name = hashlib.sha256(os.fsencode(target.name)).hexdigest()[:20]
    return target.with_name(f".dandizarr-{os.getpid()}-{worker}-{name}.part")


async def already_present(remote: RemoteFile, target: Path, threads: ThreadPoolExecutor) -> bool:
    """Whether ``target`` already holds this file (a resumed download)."""
    try:
        if os.stat(target).st_size != remote.size:
            return False
    except OSError:
        return False
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(threads, md5_file, target) == remote.digest


async def fetch_file(
    remote: RemoteFile,
    tmp: Path,
    fetch: Fetch,
    locate: Callable[[], Awaitable[RemoteFile]],
    policy: RetryPolicy,
    counter: RetryCounter,
) -> Body:
    """The file's bytes, verified (in ``tmp``, not yet at its target); ClientError when every
    try failed. ``locate`` asks the service for a fresh URL."""
    if remote.size == 0 and remote.shard_offset is not None:
        # An empty packed file: no bytes in its shard to ask for.
        empty = Body(tmp)
        if empty.md5.hexdigest() != remote.digest:
            raise ClientError(f"an empty file cannot have the md5 {remote.digest}")
        return empty
    located = remote
    relocate = located.download_url is None
    renewed = False  # a refused URL is renewed once: refused again, the file has failed

    async def attempt() -> Body:
        nonlocal located, relocate, renewed
        if relocate:
            located = await locate()  # the listing's URL may have expired
            relocate = False
        assert located.download_url is not None
        ranged = located.range_header()
        expected = 206 if ranged else 200
        body = Body(tmp)
        try:
            answer = await fetch(
                located.download_url, {"Range": ranged} if ranged else {}, expected, body.write
            )
        except BaseException:
            body.discard()
            raise
        if answer.status != expected:
            body.discard()
            said = answer.error_body[:200].decode("utf-8", "replace")
            check_status(answer.status, answer.headers.get("retry-after"), said)
            if answer.status in (403, 404, 416) and not renewed:
                renewed = relocate = True  # refused (an expired URL): ask for a new one
                raise TryAgain(f"storage refused the URL: HTTP {answer.status}: {said}")
            raise ClientError(f"from storage: {final_status_message(answer.status, said)}")
        if body.size == remote.size and body.md5.hexdigest() == remote.digest:
            return body
        body.discard()
        relocate = True
        raise TryAgain(
            f"got {body.size} bytes with md5 {body.md5.hexdigest()}, expected "
            f"{remote.size} bytes with md5 {remote.digest}"
        )

    return await retrying_async(attempt, policy, what=f"GET of {remote.path}", counter=counter)
