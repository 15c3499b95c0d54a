"""The digests uploads and downloads compute besides md5s: the archive's tree checksum, as the
server computes it, and a PUT's ``Content-MD5`` header."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from dandizarr.checksums import compute_tree


def content_md5(md5_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(md5_hex)).decode("ascii")


def tree_checksum(entries: Iterable[tuple[str, int, str]]) -> str:
    """The archive checksum ``md5-count--size`` of these files, as the server computes it.

    A collection in any order, or an iterator in path order (streamed: no list of entries).
    """
    summary = compute_tree(entries)
    digest = str(summary.digest)
    return digest if "--" in digest else f"{digest}-{summary.count}--{summary.size}"
