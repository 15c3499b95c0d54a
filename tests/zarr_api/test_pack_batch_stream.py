"""The pack batch body read as a stream (parsers/pack_batch.py, issue #39): it accepts and refuses
what ``json.loads`` and the checks on its dict did (tests/support/pack_batch_reference.py), and
refuses a body past a limit without reading the rest of it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.json_stream import JsonBody
from dandizarr_server.zarr_api.parsers.pack_batch import parse_pack_batch
from tests.support import pack_batch_reference
from tests.support.api import Actor, create_archive
from tests.support.sharded import array_files, build_shards

_MD5 = "0123456789abcdef" * 2


class _Trickle(io.RawIOBase):
    """A request stream handing out at most ``step`` bytes a read; counts what was read."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._step, self.read_bytes = data, step, 0

    def read(self, size: int = -1) -> bytes:
        size = self._step if size < 0 else min(size, self._step)
        block = self._data[self.read_bytes : self.read_bytes + size]
        self.read_bytes += len(block)
        return block


def _streamed(body: bytes, step: int = 1 << 16) -> Any:
    """The shards parsed from ``body``, or the refusal: ("refused", code)."""
    try:
        return parse_pack_batch(JsonBody(b"", _Trickle(body, step))).shards  # type: ignore[arg-type]
    except ParseError:
        return ("refused", "parse_error")
    except ValidationFailed as exc:
        return ("refused", exc.code)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _reference(body: bytes) -> Any:
    """What the parser before streaming answered: json.loads (DRF's strict constants), then
    the checks on the dict."""
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except ValueError:
        return ("refused", "parse_error")
    try:
        return pack_batch_reference.parse_pack_batch(data)
    except ValidationFailed as exc:
        return ("refused", exc.code)


# Values of every JSON type, the right ones more often; no integer past 64 bits and no lone
# surrogate (both refused by the stream as a whole, tested below).
_texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=4)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    _texts,
    st.integers(1 - 2**63, 2**63 - 1),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_texts, inner, max_size=2),
    max_leaves=4,
)
_paths = st.sampled_from(["a/0", "a/1", "b/0", "0", "a", "a/0/x", "a/../b", ".zattrs"]) | _texts
_counts = st.integers(0, 40) | st.integers(-2, 2**63 - 1) | _scalars
_md5s = st.sampled_from([_MD5, _MD5.upper(), _MD5[:-1]]) | _scalars
_member = st.fixed_dictionaries(
    {"path": _paths, "md5": _md5s, "offset": _counts, "size": _counts},
    optional={"slot": _counts, "x": _json},
)
_shard = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["s0", "s1", "a/s"]) | _scalars,
        "etag": _md5s,
        "size": st.integers(0, 100) | _counts,
        "members": st.lists(_member | _scalars, max_size=5) | _scalars,
    },
    optional={"chunks_per_shard": st.lists(st.integers(-1, 4), max_size=2) | _json, "x": _json},
)


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """A pack batch body; each shard's keys in any order (members before size, ...)."""
    shards = [
        dict(draw(st.permutations(list(shard.items())))) if isinstance(shard, dict) else shard
        for shard in draw(st.lists(_shard | _scalars, max_size=4))
    ]
    body: object = draw(
        st.sampled_from([{"shards": shards}, {"x": 1, "shards": shards}, {"shards": shards[:1]}])
        | st.builds(dict, x=_json)
    )
    text = json.dumps(body, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    return text


@given(body=_bodies(), step=st.integers(1, 64), limits=st.sampled_from([(500, 100_000), (2, 4)]))
def test_the_stream_accepts_and_refuses_what_json_loads_did(
    body: bytes, step: int, limits: tuple[int, int]
) -> None:
    """Within the limits, the same shards or the same refusal (its code); past a limit the
    stream stops reading, so a body also cut short or malformed further on is refused for the
    limit (``invalid``) where json.loads found it malformed first."""
    with override_settings(DANDIZARR_BATCH_LIMIT=limits[0], DANDIZARR_PACK_MEMBER_LIMIT=limits[1]):
        streamed, reference = _streamed(body, step), _reference(body)
    if limits == (500, 100_000):
        assert streamed == reference
    else:
        refused = ("refused", "parse_error"), ("refused", "invalid")
        assert streamed == reference or (streamed in refused and reference in refused)


def _body(members: list[Any], **shard: Any) -> bytes:
    size = sum(m["size"] for m in members if isinstance(m, dict))
    declared = {"name": "s", "etag": _MD5, "size": size, "members": members, **shard}
    return json.dumps({"shards": [declared]}).encode()


def _members(count: int) -> list[dict[str, Any]]:
    return [{"path": f"a/{i}", "md5": _MD5, "offset": i, "size": 1} for i in range(count)]


@pytest.mark.parametrize(
    "escape",
    [r"\ud800", r"\udc00", r"\ud800\u0041", r"\ud800\ud800", r"x\ud800y", r"\\\ud800"],
)
@pytest.mark.parametrize("step", [1, 5, 1 << 16])
def test_an_escaped_lone_surrogate_is_refused_anywhere(escape: str, step: int) -> None:
    """yajl would make "?" of it, or a character out of it and the next escape; json.loads
    kept it for the path checks to refuse."""
    for where in ("path", "x"):
        member = {**_members(1)[0], where: "PLACEHOLDER"}
        body = _body([member]).replace(b"PLACEHOLDER", escape.encode())
        assert _streamed(body, step) == ("refused", "invalid")


@pytest.mark.parametrize("step", [1, 7, 1 << 16])
def test_escaped_pairs_and_backslashes_are_read_as_json_loads_reads_them(step: int) -> None:
    member = {**_members(1)[0], "path": "a/\U0001f600", "x": "\\ud800 \\\\ud800"}
    body = _body([member])  # ensure_ascii: the emoji as a pair of escapes
    assert b"\\ud83d\\ude00" in body and b"\\\\ud800" in body
    shards = _streamed(body, step)
    assert shards == _reference(body) and shards[0].members[0].path == "a/\U0001f600"


def test_an_integer_past_64_bits_is_a_parse_error() -> None:
    """yajl reads 64-bit integers; no offset, size or shard size can be larger."""
    assert _streamed(_body(_members(1), size=2**64)) == ("refused", "parse_error")


def test_a_body_past_the_member_limit_is_refused_before_its_end() -> None:
    body = _body(_members(5000))
    with override_settings(DANDIZARR_PACK_MEMBER_LIMIT=10):
        stream = _Trickle(body, 1024)
        with pytest.raises(ValidationFailed, match="11 member files or more; at most 10"):
            parse_pack_batch(JsonBody(b"", stream))  # type: ignore[arg-type]
    assert stream.read_bytes < len(body) / 10


def test_a_body_past_the_shard_limit_is_refused_before_its_end() -> None:
    shard = json.loads(_body(_members(1)))["shards"][0]
    body = json.dumps({"shards": [{**shard, "name": f"s{i}"} for i in range(2000)]}).encode()
    with override_settings(DANDIZARR_BATCH_LIMIT=3):
        stream = _Trickle(body, 1024)
        with pytest.raises(ValidationFailed, match="4 shards or more; at most 3"):
            parse_pack_batch(JsonBody(b"", stream))  # type: ignore[arg-type]
    assert stream.read_bytes < len(body) / 10


def test_a_repeated_key_counts_once_its_last_value() -> None:
    member = json.dumps(_members(1)[0])
    shard = f'{{"members": [{member}, {member}], "name": "s", "etag": "{_MD5}", "size": 1, '
    body = f'{{"shards": 5, "shards": [{shard} "members": [{member}]}}]}}'.encode()
    shards = _streamed(body)
    assert shards == _reference(body) and len(shards[0].members) == 1


@pytest.mark.parametrize(
    "body",
    [b'{"shards": [', b'{"shards": []} x', b'{"shards": [{"a": NaN}]}', b'{"a": "\xff"}', b"{"],
)
def test_what_is_not_json_is_a_parse_error(body: bytes) -> None:
    assert _streamed(body) == ("refused", "parse_error") == _reference(body)


def test_the_upload_view_reads_a_pack_batch_in_any_charset_and_refuses_an_empty_body(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    url = f"/api/zarr/{zarr_id}/upload/"
    empty = owner.client.post(url, b"", content_type="application/json")
    assert (
        empty.status_code == 400 and '"shards" must be a non-empty list' in empty.json()["detail"]
    )
    form = owner.client.post(url, {"shards": "x"})  # multipart
    assert form.status_code == 400 and form.json()["code"] == "invalid"
    declarations, _, _ = build_shards(array_files())
    body = json.dumps({"shards": declarations}, ensure_ascii=False)
    response = owner.client.post(
        url, ("\n " + body).encode("utf-16"), content_type="application/json; charset=utf-16"
    )
    assert response.status_code == 200, response.content
    assert len(response.json()["shards"]) == len(declarations)
