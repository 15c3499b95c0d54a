"""A declared list of part md5s is bounded before any part is looked at (S3's 10,000 parts):
a client's number is never a loop count."""

from __future__ import annotations

import pytest

from dandizarr.objectstore.multipart import MAX_PARTS
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.upload_batch import parse_upload_files


def test_more_parts_than_s3_takes_are_refused_by_count() -> None:
    parts = ["not an md5"] * (MAX_PARTS + 1)  # each bad: the count answers first
    with pytest.raises(ValidationFailed, match=f"S3 takes at most {MAX_PARTS}"):
        parse_upload_files([{"path": "big", "etag": "0" * 32, "size": 1 << 40, "parts": parts}])
