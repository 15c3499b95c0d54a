"""The body parser of POST upload/, which reads a pack batch as a stream (not a DEFAULT_PARSER
of settings: importing the domain's errors from there would be circular)."""

from __future__ import annotations

import codecs
import io
import json
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.parsers import BaseParser, get_encoding  # type: ignore[attr-defined]

from dandizarr_server.zarr_api.parsers.json_body import SafeJSONParser
from dandizarr_server.zarr_api.parsers.json_stream import JsonBody
from dandizarr_server.zarr_api.parsers.pack_batch import parse_pack_batch

# What is read of a body to see whether it is a JSON object (after any leading whitespace).
_HEAD_BYTES = 64 * 1024
_JSON_WHITESPACE = b" \t\n\r"


class UploadBodyParser(BaseParser):
    """POST upload/'s JSON body. A JSON object is a pack batch: read from the request's stream
    by ``parse_pack_batch`` into its shards (a ``PackBatchBody``), so that neither the body
    nor its 100,000 members are ever held whole. Anything else (a loose batch's list of
    files) is parsed as ``SafeJSONParser`` parses every other body.

    Not a JSONParser: DRF reads the whole body into memory (``request.body``) before such a
    parser runs, checking it against DATA_UPLOAD_MAX_MEMORY_SIZE; here that limit is checked
    against the Content-Length the request's stream is cut to."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        context = parser_context or {}
        request = context.get("request")
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and length > limit:
            raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")
        if codecs.lookup(get_encoding(context)).name != "utf-8":
            # Another charset (rare): decoded whole as before, an object read again as UTF-8.
            data = SafeJSONParser().parse(stream, media_type, parser_context)
            if isinstance(data, dict):
                return parse_pack_batch(JsonBody(json.dumps(data).encode(), io.BytesIO()))
            return data
        # Leading whitespace is dropped a block at a time, never gathered: a body of 32 MiB of
        # blanks would otherwise be copied over and over as it grew.
        head = stream.read(_HEAD_BYTES).lstrip(_JSON_WHITESPACE)
        while not head:
            more = stream.read(_HEAD_BYTES)
            if not more:
                break
            head = more.lstrip(_JSON_WHITESPACE)
        if head.startswith(b"{"):
            return parse_pack_batch(JsonBody(head, stream))
        whole = io.BytesIO(head + stream.read())
        return SafeJSONParser().parse(whole, media_type, parser_context)
