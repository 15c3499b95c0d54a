"""A faster parser for S3's ListObjectsV2 replies, plugged into botocore.

botocore parses every reply through its generic model-driven XML parser, which walks every field
through the shape model and every timestamp through dateutil: the largest share of a batch's
completion, which lists the batch's key range to verify it (docs/performance.md). This parser
reads the few fields the store uses with ElementTree, and hands every other operation, and every
error reply, to botocore's own parser. Transport, signing, retries and the decoding of
URL-encoded keys stay botocore's.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

from botocore import handlers
from botocore.parsers import ResponseParserFactory
from botocore.session import Session

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_LISTING_SHAPE = "ListObjectsV2Output"
_TOP_LEVEL = (
    "Name",
    "Prefix",
    "StartAfter",
    "ContinuationToken",
    "NextContinuationToken",
    "EncodingType",
    "Delimiter",
)


def _text(element: ElementTree.Element, name: str) -> str | None:
    found = element.find(_NS + name)
    if found is None:
        found = element.find(name)  # a server that leaves the namespace out
    return None if found is None else (found.text or "")


# Where the reply's XML tree, parsed once by ``_check_listing_reply``, waits for the parser.
_ROOT = "dandizarr_listing_root"


def parse_listing(body: bytes, root: ElementTree.Element | None = None) -> dict[str, Any]:
    """The fields of a ListObjectsV2 reply that the store reads, as botocore names them."""
    if root is None:
        root = ElementTree.fromstring(body)
    ns = _NS if root.tag.startswith(_NS) else ""
    parsed: dict[str, Any] = {}
    for name in _TOP_LEVEL:
        value = _text(root, name)
        if value is not None:
            parsed[name] = value
    truncated = _text(root, "IsTruncated")
    parsed["IsTruncated"] = (truncated or "").strip().lower() == "true"
    count = _text(root, "KeyCount")
    if count is not None:
        parsed["KeyCount"] = int(count)
    contents = []
    for item in root.iter(ns + "Contents"):
        entry: dict[str, Any] = {}
        for child in item:
            tag = child.tag[len(ns) :]
            if tag == "Key":
                entry["Key"] = child.text or ""
            elif tag == "Size":
                entry["Size"] = int(child.text or 0)
            elif tag == "ETag":
                entry["ETag"] = child.text or ""
        contents.append(entry)
    if contents:
        parsed["Contents"] = contents
    prefixes = [
        {"Prefix": _text(item, "Prefix") or ""} for item in root.iter(ns + "CommonPrefixes")
    ]
    if prefixes:
        parsed["CommonPrefixes"] = prefixes
    return parsed


class _ListingParser:
    """Delegates to botocore's parser except for successful ListObjectsV2 replies."""

    def __init__(self, default: Any) -> None:
        self._default = default

    def parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if (
            shape is not None
            and shape.name == _LISTING_SHAPE
            and response.get("status_code") == 200
            and response.get("body")
        ):
            parsed = parse_listing(response["body"], response.get(_ROOT))
            parsed["ResponseMetadata"] = {
                "HTTPStatusCode": 200,
                "HTTPHeaders": dict(response.get("headers", {})),
                "RequestId": response.get("headers", {}).get("x-amz-request-id", ""),
                "RetryAttempts": 0,
            }
            return parsed
        result: dict[str, Any] = self._default.parse(response, shape)
        return result


class ListingParserFactory(ResponseParserFactory):
    """Register on a botocore session before making clients from it."""

    def create_parser(self, protocol_name: str) -> Any:
        return _ListingParser(super().create_parser(protocol_name))


# botocore's check that an S3 reply of 200 is not an error in disguise (an <Error> body, or a
# body cut short): it parses the whole body a first time, for every operation.
_BOTOCORE_200_CHECK = getattr(handlers, "_handle_200_error", None)


def _check_200_reply(operation_model: Any, response_dict: dict[str, Any], **kwargs: Any) -> None:
    """botocore's check, except that a listing's body is parsed once for both the check and
    the parser."""
    if operation_model.name != "ListObjectsV2":
        if _BOTOCORE_200_CHECK is not None:
            _BOTOCORE_200_CHECK(operation_model, response_dict, **kwargs)
        return
    if response_dict.get("status_code") != 200 or not response_dict.get("body"):
        return
    try:
        root = ElementTree.fromstring(response_dict["body"])
    except ElementTree.ParseError:
        response_dict["status_code"] = 500  # cut short: retried, as botocore does
        return
    if root.tag == "Error":
        response_dict["status_code"] = 500
        return
    response_dict[_ROOT] = root


def use_fast_listing(session: Session) -> None:
    """Make the clients this botocore session creates from now on parse listings here."""
    session.register_component("response_parser_factory", ListingParserFactory())
    if _BOTOCORE_200_CHECK is not None:
        events = session.get_component("event_emitter")
        events.unregister("before-parse.s3.*", _BOTOCORE_200_CHECK)
        events.register_first("before-parse.s3.*", _check_200_reply)
