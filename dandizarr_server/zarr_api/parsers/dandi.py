"""Request shapes of the real ``dandi`` CLI (docs/api.md, "DANDI clients"): the newest release's
``POST files/`` body, the prefix of a ``files`` listing, and which client signs what."""

from __future__ import annotations

import re
from collections.abc import Mapping

from dandizarr.objectstore.digests import md5_hex_from_content_md5
from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.problems import (
    Problem,
    check_batch_size,
    check_paths,
    invalid,
)

# dandi-cli up to 0.48 (the batch flow) PUTs with ``X-Amz-ACL: bucket-owner-full-control`` and
# no Content-MD5: its URLs must sign that header instead of the md5.
_ACL_CLIENT = re.compile(r"^dandi/0\.([0-9]|[1-3][0-9]|4[0-8])(\.|\s|$)")
BATCH_FLOW_ACL = "bucket-owner-full-control"


def parse_dandi_upload_files(data: object) -> list[FileDeclaration]:
    """``[{"path": ..., "base64md5": ...}, ...]`` (at most ``batch_limit``): the files whose
    upload URLs are asked for, with their md5s as hex."""
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValidationFailed('the body must be a list of {"path": ..., "base64md5": ...} objects')
    check_batch_size(len(data))
    paths = check_paths([item.get("path") for item in data])
    md5s: list[str] = []
    problems: list[Problem] = []
    for path, item in zip(paths, data, strict=True):
        raw = item.get("base64md5")
        try:
            md5s.append(md5_hex_from_content_md5(raw) if isinstance(raw, str) else "")
        except ValueError:
            md5s.append("")
        if not md5s[-1]:
            problems.append({"path": path, "problem": "base64md5 must be base64 of a 16-byte md5"})
    if problems:
        raise invalid("base64md5 values", problems)
    return [FileDeclaration(path, md5) for path, md5 in zip(paths, md5s, strict=True)]


def required_acl(headers: Mapping[str, str]) -> str:
    """The ACL a batch-flow request's upload URLs require: ``BATCH_FLOW_ACL`` when it comes
    from a dandi-cli that PUTs with that header and no Content-MD5 (0.48 and older), else none
    (the URLs are bound to each file's md5)."""
    return BATCH_FLOW_ACL if _ACL_CLIENT.match(headers.get("User-Agent", "")) else ""


def parse_listing_prefix(prefix: str) -> str:
    """The ``prefix`` of a DANDI ``files`` listing: any start of an archive path."""
    if prefix.startswith("/") or "\x00" in prefix:
        raise ValidationFailed(f"prefix {prefix!r} must be a relative path without NUL")
    return prefix


def query_flag(value: str | None) -> bool:
    return value in {"1", "true", "True", "yes"}
