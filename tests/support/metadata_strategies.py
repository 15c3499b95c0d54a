"""Hypothesis strategies of metadata documents as an attacker writes them (issue #47): any
``zarr.json``, ``.zarray``, ``.zattrs``, ``.zgroup`` and ``.zmetadata``, and the archives they
make, for the fuzzers of every reader (tests/sharding/test_metadata_fuzz.py, the library;
tests/zarr_api/test_describe_fuzz.py, the service's describing code).

Two kinds of document. ``json_values``: any JSON at all. ``nearly_valid``: a valid skeleton of
each kind (a sharded v3 array with its OME group, a v2 array with filters and a compressor,
NGFF 0.4 attributes with channels, a plate and a well, consolidated metadata) with some of its
values, anywhere in it, replaced by hostile ones: nesting past every bound, numbers no type
holds (``Infinity``, ``NaN``, ``10**400``, ``2**200``), wrong types, long lists, sharding
codecs nested hundreds deep. The data type and the fill value are drawn together, so every
type meets every hostile fill value.

Deep and long values are built by functions of their size (a strategy of sizes, mapped), not
by hypothesis' recursion, so a document can nest 400 deep or list 80,000 filters; deeper than
``json.dumps`` goes, a document is built as bytes (``deep_bytes``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from dandizarr.ome import MAX_LISTED
from dandizarr.sharding.array_metadata import DATA_TYPES
from dandizarr.sharding.metadata_values import MAX_CODECS, MAX_JSON_DEPTH

ARRAY_V2 = ".zarray"
ARRAY_V3 = "zarr.json"
GROUP_V2 = ".zgroup"
ATTRIBUTES_V2 = ".zattrs"
CONSOLIDATED = ".zmetadata"
NAMES = (ARRAY_V2, ARRAY_V3, GROUP_V2, ATTRIBUTES_V2, CONSOLIDATED)

# Numbers a reader converts: non-finite, past every type's range, int64's and uint64's edges,
# negative zero, the smallest subnormal, float32's and float16's overflow.
HOSTILE_NUMBERS: tuple[Any, ...] = (
    math.inf, -math.inf, math.nan, 10**400, -(10**400), 2**200, 2**64, 2**63, 2**63 - 1,
    -(2**63), -(2**63) - 1, -1, 0, 1, -0.0, 1e300, -1e300, 5e-324, 1.5, 0.5,
    3.4028236e38, 65520.0, 10**30, True, False,
)  # fmt: skip
# Strings where numbers, names and hex fill values are read.
HOSTILE_STRINGS: tuple[str, ...] = (
    "", "0x", "0x0", "0xzz", "0x" + "ff" * 4, "0x" + "00" * 8, "0x" + "ab" * 5000, "NaN",
    "Infinity", "-Infinity", "nan", "inf", "x" * 10_000, "<u1", "|O", ">f8", "r8",
    "r" + "9" * 5000, "V-1", "<U99999999999999999999", "sharding_indexed", "bytes",
    "transpose", "F", "C", "/", ".", "\x00", "\ud800", "1" * 5000, "../../etc",
)  # fmt: skip


def deep_list(depth: int) -> Any:
    """``[[[...]]]`` ``depth`` deep, built without recursion."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_dict(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def nested_sharding(depth: int, inner: list[int] | None = None) -> list[Any]:
    """A codec chain with ``sharding_indexed`` nested ``depth`` deep (finding 1 of issue #47
    at 300)."""
    codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    for _ in range(depth):
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": inner or [1, 1],
                    "codecs": codecs,
                    "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
                },
            }
        ]
    return codecs


def deep_bytes(depth: int, opener: bytes = b"[") -> bytes:
    """A document nested ``depth`` deep as bytes (past what ``json.dumps`` writes)."""
    closer = b"]" if opener == b"[" else b"}"
    inner = b'"a":' if opener == b"{" else b""
    return b'{"zarr_format": 3, "shape": ' + (opener + inner) * depth + b"0" + closer * depth + b"}"


# How long a long list is (see ``structural``).
LONG = 5000

hostile_numbers = st.sampled_from(HOSTILE_NUMBERS)
hostile_strings = st.sampled_from(HOSTILE_STRINGS)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    hostile_numbers,
    hostile_strings,
)
keys = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        [
            "name", "configuration", "codecs", "chunk_shape", "shape", "chunks", "dtype",
            "data_type", "fill_value", "id", "level", "order", "endian", "multiscales",
            "axes", "datasets", "path", "scale", "translation", "type", "omero", "channels",
            "window", "color", "ome", "attributes", "version", "metadata", "filters",
        ]
    ),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=24,
)


def _long(build: Callable[[int], Any]) -> st.SearchStrategy[Any]:
    """A list (or object) ``build`` makes of a length just past a bound or far past it."""
    return st.one_of(st.integers(MAX_LISTED - 1, MAX_CODECS + 1), st.integers(0, LONG)).map(build)


# Values no reader should interpret as deep or as long as they are: just past each bound
# (MAX_LISTED 16, MAX_RANK 32, MAX_JSON_DEPTH 64, MAX_CODECS 64, MAX_DTYPE_FIELDS 256,
# MAX_CODEC_NESTING 4), and far past it. Long is 5,000 here: enough for a reader quadratic in
# a list to cost seconds; the corpus walk (tests/zarr_api/test_hostile_metadata.py) has the
# megabyte ones (80,000 filters), which cost the fuzzer more to write and parse than to read.
# Sizes are integers, not a few values: hypothesis draws each value of a small finite
# strategy once and then avoids it, so a sampled 300 would be rare.
structural = st.one_of(
    st.integers(MAX_JSON_DEPTH - 2, 400).map(deep_list),
    st.integers(MAX_JSON_DEPTH - 2, 400).map(deep_dict),
    st.integers(1, 400).map(nested_sharding),
    _long(lambda n: [{"id": "delta", "dtype": "<u1"}] * n),
    _long(lambda n: [1] * n),
    _long(lambda n: [{"name": "bytes"}] * n),
    _long(lambda n: {f"k{i}": i for i in range(n)}),
    _long(lambda n: [[f"f{i}", "<u1"] for i in range(n)]),
)
hostile_values = st.one_of(scalars, json_values, structural)

# The data types a fill value meets: every one the readers convert, and some they refuse.
V3_TYPES = st.sampled_from([*DATA_TYPES, "r16", "r" + "9" * 5000, "string", "float8"])
V2_TYPES = st.sampled_from(
    ["|b1", "|i1", "<i2", ">i4", "<i8", "|u1", "<u2", ">u4", "<u8", "<f2", ">f4", "<f8",
     "<c8", ">c16", "|O", "<U5", "|S3", "<M8[ns]", "|V8", [["x", "<i4"], ["y", ">f8", [2]]]]
)  # fmt: skip
hostile_fills = st.one_of(
    hostile_numbers,
    hostile_strings,
    st.lists(hostile_numbers | hostile_strings, min_size=0, max_size=3),
    scalars,
)


def fill_values(data_type: Any) -> st.SearchStrategy[Any]:
    """A fill value for ``data_type`` (v3's name or v2's type string): half the time one it
    holds, so what comes after the fill value (the codecs) is read too; else hostile."""
    kind = str(data_type)
    if "b" in kind[-2:] or kind == "bool":
        valid: Any = False
    elif "c" in kind[-3:] or kind.startswith("complex"):
        valid = [0.0, "NaN"]
    else:
        valid = 0
    return st.one_of(st.just(valid), st.just(valid), hostile_fills)


def ome_v04() -> dict[str, Any]:
    """NGFF 0.4 attributes: an image of levels s0 and s1, two channels, a plate, a well."""
    return {
        "multiscales": [
            {
                "version": "0.4",
                "name": "image",
                "axes": [
                    {"name": "c", "type": "channel"},
                    {"name": "y", "type": "space", "unit": "micrometer"},
                    {"name": "x", "type": "space", "unit": "micrometer"},
                ],
                "datasets": [
                    {
                        "path": f"s{i}",
                        "coordinateTransformations": [
                            {"type": "scale", "scale": [1.0, 2.0**i, 2.0**i]},
                            {"type": "translation", "translation": [0.0, 0.5, 0.5]},
                        ],
                    }
                    for i in range(2)
                ],
                "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.5, 0.5]}],
            }
        ],
        "omero": {
            "channels": [
                {
                    "label": "DAPI",
                    "color": "0000FF",
                    "window": {"start": 0, "end": 1500, "min": 0, "max": 65535},
                    "active": True,
                },
                {"label": "GFP", "color": "00FF00", "window": {"start": 200, "end": 2500}},
            ]
        },
        "plate": {"name": "p", "wells": [{"path": "A/1"}], "rows": [{"name": "A"}]},
        "well": {"images": [{"path": "0"}]},
        "labels": ["cells"],
        "image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
    }


# A valid v2 level of ome_v04's image.
V2_LEVEL = {
    "zarr_format": 2, "shape": [2, 64, 64], "chunks": [1, 32, 32], "dtype": "<u2",
    "compressor": {"id": "zstd", "level": 1}, "fill_value": 0, "order": "C", "filters": None,
}  # fmt: skip


@st.composite
def v3_array(draw: st.DrawFn) -> dict[str, Any]:
    """A sharded v3 array (3-D: c, y, x) of any data type and fill value."""
    data_type = draw(V3_TYPES)
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [2, 64, 64],
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 32, 32]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": draw(fill_values(data_type)),
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [1, 16, 16],
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
                    ],
                    "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
                    "index_location": "end",
                },
            }
        ],
        "attributes": {},
        "dimension_names": ["c", "y", "x"],
    }


@st.composite
def v2_array(draw: st.DrawFn) -> dict[str, Any]:
    """A v2 array (3-D) of any dtype and fill value, with a compressor and maybe filters."""
    compressor = draw(
        st.sampled_from(
            [
                None,
                {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
                {"id": "zstd", "level": 1},
                {"id": "gzip", "level": 5},
            ]
        )
    )
    dtype = draw(V2_TYPES)
    return {
        "zarr_format": 2,
        "shape": [2, 64, 64],
        "chunks": [1, 32, 32],
        "dtype": dtype,
        "compressor": compressor,
        "fill_value": draw(fill_values(dtype)),
        "order": draw(st.sampled_from(["C", "F"])),
        "filters": draw(st.sampled_from([None, [{"id": "delta", "dtype": "<u2"}]])),
        "dimension_separator": draw(st.sampled_from([".", "/"])),
    }


def v3_group() -> dict[str, Any]:
    ome = {"version": "0.5", **ome_v04()}
    ome["multiscales"][0].pop("version")
    return {"zarr_format": 3, "node_type": "group", "attributes": {"ome": ome}}


@st.composite
def consolidated(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "zarr_consolidated_format": 1,
        "metadata": {
            GROUP_V2: {"zarr_format": 2},
            ATTRIBUTES_V2: ome_v04(),
            "s0/.zarray": draw(v2_array()),
            "s0/.zattrs": {},
        },
    }


def skeleton(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid document of the file ``name``."""
    if name == ARRAY_V3:
        return st.one_of(v3_array(), st.just(v3_group()))
    if name == ARRAY_V2:
        return v2_array()
    if name == ATTRIBUTES_V2:
        return st.builds(ome_v04)
    if name == CONSOLIDATED:
        return consolidated()
    return st.just({"zarr_format": 2})


def _paths(doc: Any) -> list[tuple[Any, ...]]:
    """Every place in ``doc`` a value sits, as the keys and indices that reach it."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        path, value = stack.pop()
        if path:
            found.append(path)
        # The first few of each container: a hostile value already put in is not walked
        # whole (80,000 filters), nor deeper than the skeletons go.
        if isinstance(value, dict) and len(path) < 12:
            stack.extend(((*path, k), v) for k, v in list(value.items())[:8])
        elif isinstance(value, list) and len(path) < 12:
            stack.extend(((*path, i), v) for i, v in enumerate(value[:8]))
    return sorted(found, key=repr)


def _replaced(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    """``doc`` with the value at ``path`` replaced (or its key deleted); copies the way down."""
    head, rest = path[0], path[1:]
    copy: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    if rest:
        copy[head] = _replaced(doc[head], rest, value, delete)
    elif delete and isinstance(copy, dict):
        del copy[head]
    else:
        copy[head] = value
    return copy


# Codec chains that build (each level's inner chunks divide the shard: the skeletons' arrays
# are 3-D, chunks [1, 32, 32]) nested from within the bound to far past it, and chains of
# codecs with hostile configurations.
CODEC_JSON = (
    {"name": "bytes", "configuration": {"endian": "big"}},
    {"name": "bytes", "configuration": {"endian": 1}},
    {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
    {"name": "transpose", "configuration": {"order": [math.inf, 0, 1]}},
    {"name": "transpose", "configuration": {"order": list(range(5000))}},
    {"name": "gzip", "configuration": {"level": 10**400}},
    {"name": "zstd", "configuration": {"level": math.inf, "checksum": "yes"}},
    {"name": "blosc", "configuration": {"cname": "x" * 5000, "clevel": -1, "typesize": 2**64}},
    {"name": "crc32c"},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [0, 1, 1], "codecs": []}},
    {"name": "sharding_indexed", "configuration": {"codecs": "bytes", "index_codecs": {}}},
    "bytes",
    5,
)
# Depths as integers, not a few sizes: hypothesis draws each distinct value of a small
# finite strategy once and then avoids it, so a sampled 300 would be rare.
hostile_codecs = st.one_of(
    st.integers(1, 400).map(lambda n: nested_sharding(n, [1, 16, 16])),
    st.lists(st.sampled_from(CODEC_JSON), max_size=6),
)
KEY_VALUES = {"codecs": hostile_codecs, "index_codecs": hostile_codecs, "fill_value": hostile_fills}

# The keys whose values readers convert (numbers, types) or walk (chains, lists).
AIMED_AT = frozenset(
    {
        "shape", "chunks", "chunk_shape", "dtype", "data_type", "fill_value", "codecs",
        "index_codecs", "filters", "compressor", "configuration", "level", "clevel",
        "blocksize", "typesize", "order", "endian", "axes", "datasets", "scale",
        "translation", "coordinateTransformations", "channels", "window", "multiscales",
        "metadata", "chunk_key_encoding", "dimension_separator", "index_location",
    }
)  # fmt: skip


@st.composite
def nearly_valid(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A valid ``name`` document with one to four of its values (anywhere) made hostile."""
    doc = draw(skeleton(name))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        doc = _replaced(
            doc, draw(st.sampled_from(paths)), draw(hostile_values), draw(st.booleans())
        )
    return doc


@st.composite
def chained(draw: st.DrawFn) -> dict[str, Any]:
    """A v3 array whose every other value is read (a type and a fill value it holds) and
    whose codec chain is hostile: what reaches the chain's builder."""
    doc = draw(v3_array())
    return {**doc, "data_type": "uint16", "fill_value": 0, "codecs": draw(hostile_codecs)}


@st.composite
def aimed(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A valid ``name`` document with one value that readers convert or walk (a key of
    AIMED_AT, drawn first, then where it sits) made hostile: the one mutation that reaches a
    reader past the others' checks (a 300-deep chain under a valid type and fill value)."""
    doc = draw(skeleton(name))
    paths = [path for path in _paths(doc) if path[-1] in AIMED_AT]
    if not paths:
        return doc
    key = draw(st.sampled_from(sorted({str(path[-1]) for path in paths})))
    path = draw(st.sampled_from([p for p in paths if p[-1] == key]))
    specific = KEY_VALUES.get(key)
    values = specific if specific is not None and draw(st.integers(0, 3)) else hostile_values
    return _replaced(doc, path, draw(values), False)


def documents_of(name: str) -> st.SearchStrategy[Any]:
    """Any document a file ``name`` may hold: nearly valid mostly (one aimed value, or any
    values; a v3 array's codec chain), else any JSON at all."""
    chains = [chained()] if name == ARRAY_V3 else []
    return st.one_of(
        aimed(name), aimed(name), *chains, nearly_valid(name), json_values | structural
    )


def encoded(doc: Any) -> bytes:
    """The document's bytes as a careless writer makes them: NaN and Infinity as Python's
    json writes them (not JSON, but what ``json.loads`` reads)."""
    return json.dumps(doc).encode("utf-8", "surrogatepass")


raw_documents = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            deep_bytes(64), deep_bytes(65), deep_bytes(900), deep_bytes(5000),
            deep_bytes(200_000), deep_bytes(100, b"{"), b"\xff\xfe", b"[]", b"null", b"1e400",
            b'{"fill_value": 1' + b"0" * 5000 + b"}", b'{"a": NaN, "b": -Infinity}',
        ]
    ),
)  # fmt: skip


@st.composite
def document_files(draw: st.DrawFn, name: str) -> bytes:
    """A file ``name``'s bytes: a document (nearly valid or not) encoded, or raw bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(raw_documents)
    return encoded(draw(documents_of(name)))


# The archives the service's describing code reads: an image group (v2 or v3) at the root
# with its levels s0 and s1, and sometimes a labels group, a plain array and consolidated
# metadata. {archive path: bytes}.
@st.composite
def archives(draw: st.DrawFn) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    if draw(st.booleans()):  # NGFF 0.4 in Zarr v2
        files[GROUP_V2] = draw(document_files(GROUP_V2))
        files[ATTRIBUTES_V2] = draw(document_files(ATTRIBUTES_V2))
        level = ARRAY_V2
    else:  # NGFF 0.5 in Zarr v3
        files[ARRAY_V3] = encoded(v3_group()) if draw(st.booleans()) else b""
        if not files[ARRAY_V3]:
            files[ARRAY_V3] = encoded(draw(nearly_valid(ARRAY_V3)))
        level = ARRAY_V3
    for i in range(draw(st.integers(0, 2))):
        files[f"s{i}/{level}"] = draw(document_files(level))
    if draw(st.booleans()):
        files[f"plain/{draw(st.sampled_from([ARRAY_V2, ARRAY_V3]))}"] = draw(
            document_files(draw(st.sampled_from([ARRAY_V2, ARRAY_V3])))
        )
    if draw(st.booleans()):
        files[f"labels/{ATTRIBUTES_V2}"] = draw(document_files(ATTRIBUTES_V2))
        files[f"labels/{GROUP_V2}"] = b'{"zarr_format": 2}'
    if draw(st.booleans()):
        files[CONSOLIDATED] = draw(document_files(CONSOLIDATED))
    return files
