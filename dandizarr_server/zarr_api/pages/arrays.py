"""The Zarr arrays of an archive: found through its ``.checksum`` tree, described, and opened
with the sharding library's ``Array`` (Zarr v3 as it is; Zarr v2 as the v3 array it is
equivalent to: the same chunk bytes under ``v2`` chunk keys, its compressor as a codec).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dandizarr.ome import dtype_name
from dandizarr.sharding.array_documents import (
    ARRAY_V2,
    ARRAY_V3,
    ArrayDocument,
    MetadataError,
    parse_document,
)
from dandizarr.sharding.array_metadata import ArrayMetadata
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec, CodecJSON, codec_name_config
from dandizarr.sharding.index import as_index_codecs
from dandizarr_server.zarr_api.pages.preview import PREVIEW_SIDE

# How far the archive page looks for arrays: directories read (pages.archive_scan), plain
# arrays listed.
MAX_DIRECTORIES = 200
MAX_ARRAYS = 24
# A preview's budget, checked from the metadata before any chunk is read (an anonymous
# request may ask for one): the chunks its plane spans and the storage reads it makes (chunks,
# and a sharded array's shard indexes), the bytes the chunks decode to plus the shard indexes
# read, and the size of a metadata document read to describe an array. Chunks decode to no
# more than their array's chunk size (dandizarr.sharding.codecs.compression), and reading
# stops at the deadline (pages.reader.ArchiveFiles).
MAX_PREVIEW_CHUNKS = 1024
MAX_PREVIEW_DECODED_BYTES = 64 << 20
MAX_METADATA_BYTES = 1 << 20


class Unsupported(ValueError):
    """The array's metadata or codecs are not ones this service reads."""


@dataclass(frozen=True)
class ArrayInfo:
    path: str  # the array's directory in the archive ("" for an archive that is one array)
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    codecs: tuple[str, ...]  # compressor, filters or codecs, as "name(config)"
    # "sharding_indexed: inner chunks (a, b)" for a v3 sharded array.
    sharding: str | None
    # The array as v3 metadata for reading, or why it has no preview.
    metadata: ArrayMetadata | None
    preview_problem: str | None

    @property
    def metadata_name(self) -> str:
        return ".zarray" if self.zarr_format == 2 else "zarr.json"


def _codec_text(name: str, config: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in config.items() if k not in ("id", "name"))
    return f"{name}({shown})" if shown else name


def _v3_codecs(doc: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    names: list[str] = []
    sharding = None
    for codec in doc.get("codecs") or []:
        name, config = (codec, {}) if isinstance(codec, str) else (codec.get("name"), codec)
        config = config.get("configuration") or {}
        if name == "sharding_indexed":
            inner = [c.get("name") if isinstance(c, Mapping) else c for c in config["codecs"]]
            sharding = (
                f"sharding_indexed: inner chunks {tuple(config.get('chunk_shape', ()))}, "
                f"inner codecs {', '.join(map(str, inner))}"
            )
            names.append(str(name))
        else:
            names.append(_codec_text(str(name), config))
    return tuple(names), sharding


def describe(path: str, name: str, raw: bytes) -> ArrayInfo | None:
    """The array whose metadata file ``path/name`` holds ``raw``; None for a group or a file
    that is no JSON object."""
    try:
        return describe_document(path, name, parse_document(raw))
    except MetadataError:
        return None


def describe_document(path: str, name: str, doc: Mapping[str, Any]) -> ArrayInfo | None:
    """The array whose metadata file ``path/name`` parsed to ``doc``; None for a group (the
    library's one reader: dandizarr.sharding.array_documents)."""
    zarr_format = 2 if name == ARRAY_V2 else 3
    if name == ARRAY_V3 and doc.get("node_type") != "array":
        return None
    try:
        array = ArrayDocument.from_json(name, doc)
        assert array is not None  # a v3 group was answered above
        if zarr_format == 2:
            compressor = doc.get("compressor")
            filters = doc.get("filters")
            codecs = tuple(
                _codec_text(str(c.get("id")), c)
                for c in [*(filters if isinstance(filters, list) else []), compressor]
                if isinstance(c, Mapping)
            )
            sharding = None
        else:
            codecs, sharding = _v3_codecs(doc)
        dtype = dtype_name(zarr_format, doc.get("dtype" if zarr_format == 2 else "data_type"))
    except (MetadataError, AttributeError, KeyError, TypeError) as error:
        return ArrayInfo(path, zarr_format, (), (), "?", (), None, None, str(error))
    metadata, problem = None, None
    try:
        metadata = array.v3_metadata()
        spec = ArraySpec(metadata.chunk_shape, metadata.dtype, metadata.fill_value)
        pipeline_from_json(metadata.codecs, spec)
        problem = _plane_problem(metadata)
    except (ValueError, KeyError, TypeError) as error:
        problem = str(error) or type(error).__name__
    return ArrayInfo(
        path, zarr_format, array.shape, array.chunks, dtype, codecs, sharding,
        metadata if problem is None else None, problem,
    )  # fmt: skip


@dataclass(frozen=True)
class ReadGeometry:
    """How a plane read reads: the chunks it decodes (a sharded array's inner chunks, else its
    chunks), and for a sharded array each shard's index, read once per shard it touches."""

    chunk: tuple[int, ...]  # the chunks decoded
    shard: tuple[int, ...] | None  # the stored objects holding them, when sharded
    index_bytes: int  # one shard's index (0: not sharded)


def read_geometry(metadata: ArrayMetadata) -> ReadGeometry:
    shape = metadata.chunk_shape
    for codec in metadata.codecs:
        name, config = codec_name_config(codec)
        if name != "sharding_indexed":
            continue
        inner = config.get("chunk_shape")
        if isinstance(inner, list) and len(inner) == len(shape) and all(inner):
            inner_shape = tuple(int(n) for n in inner)
            per_shard = [s // c for s, c in zip(shape, inner_shape, strict=True)]
            index_codecs = as_index_codecs(config.get("index_codecs"))
            return ReadGeometry(inner_shape, shape, index_codecs.nbytes(per_shard))
    return ReadGeometry(shape, None, 0)


def _blocks_spanned(pixels: Sequence[int], size: int) -> int:
    """How many blocks of ``size`` the pixels fall in. A whole side is a ``range`` as long as
    the metadata declares (10**30 is a valid JSON number): counted arithmetically, never
    iterated. Strided pixels are at most PREVIEW_SIDE."""
    if isinstance(pixels, range) and pixels.step == 1:
        return (pixels.stop - 1) // size - pixels.start // size + 1 if pixels else 0
    return len({p // size for p in pixels})


def _read_cost(
    metadata: ArrayMetadata, rows: Sequence[int], cols: Sequence[int]
) -> tuple[int, int, int]:
    """(chunks, reads, bytes) of reading pixels ``rows`` x ``cols`` of the middle plane: the
    chunks they fall in, decoded whole; a read each, and a sharded array's index once per
    shard; the bytes those chunks decode to plus the shard indexes read."""
    geometry = read_geometry(metadata)

    def spanned(block: Sequence[int]) -> int:
        return _blocks_spanned(rows, block[-2]) * _blocks_spanned(cols, block[-1])

    chunks = spanned(geometry.chunk)
    shards = spanned(geometry.shard) if geometry.shard is not None else 0
    decoded = chunks * math.prod(geometry.chunk) * metadata.dtype.itemsize
    return chunks, chunks + shards, decoded + shards * geometry.index_bytes


def plane_read_cost(metadata: ArrayMetadata) -> tuple[int, int, int]:
    """(chunks, reads, bytes) a read of the whole middle plane costs, from the metadata alone."""
    height, width = metadata.shape[-2:]
    return _read_cost(metadata, range(height), range(width))


def _within_budget(cost: tuple[int, int, int]) -> bool:
    chunks, reads, read_bytes = cost
    return (
        chunks <= MAX_PREVIEW_CHUNKS
        and reads <= MAX_PREVIEW_CHUNKS
        and read_bytes <= MAX_PREVIEW_DECODED_BYTES
    )


@dataclass(frozen=True)
class PlanePlan:
    """The pixels of the middle plane a preview reads: every one, or (a plane too large to read
    whole) evenly strided rows and columns, as many as the budget's chunks allow."""

    rows: Sequence[int]  # a range when whole
    cols: Sequence[int]
    whole: bool


# A strided picture narrower than this is no picture: the plane is refused instead.
MIN_STRIDED_SIDE = 16


def _strided(n: int, count: int) -> tuple[int, ...]:
    """``count`` pixels of ``n``, each in the middle of its stride."""
    return tuple((2 * j + 1) * n // (2 * count) for j in range(count))


def plane_plan(metadata: ArrayMetadata) -> PlanePlan | None:
    """What a preview of the middle plane reads, within the budget; None when nothing does."""
    height, width = metadata.shape[-2:]
    if _within_budget(plane_read_cost(metadata)):
        return PlanePlan(range(height), range(width), True)
    longest = max(height, width)
    side = min(longest, PREVIEW_SIDE)
    while side >= MIN_STRIDED_SIDE:
        rows = _strided(height, max(1, min(height, round(side * height / longest))))
        cols = _strided(width, max(1, min(width, round(side * width / longest))))
        if _within_budget(_read_cost(metadata, rows, cols)):
            return PlanePlan(rows, cols, False)
        side = side * 3 // 4
    return None


def _sharding_problem(codecs: Sequence[CodecJSON]) -> str | None:
    """Why a chain with ``sharding_indexed`` is not previewed: the sharding codec must be its
    chain's only codec, at every level. With codecs around it (a transpose before it, gzip or
    zstd after it: compression outside the shard) a read is no longer of the plane's inner
    chunks but of whole shards, decoded (decompressed) whole before any index is seen."""
    names = [codec_name_config(codec)[0] for codec in codecs]
    if "sharding_indexed" not in names:
        return None
    if len(names) > 1:
        others = ", ".join(name for name in names if name != "sharding_indexed")
        return (
            f"sharding_indexed is not its chain's only codec ({others} around it): whole "
            "shards would be decoded, which a preview does not do"
        )
    inner = codec_name_config(codecs[0])[1].get("codecs")
    return _sharding_problem(inner) if isinstance(inner, list) else None


def _plane_problem(metadata: ArrayMetadata) -> str | None:
    if problem := _sharding_problem(metadata.codecs):
        return problem
    if len(metadata.shape) < 2:
        return f"a {len(metadata.shape)}-D array has no plane to draw"
    if metadata.dtype.kind not in "biufc":
        return f"data type {metadata.dtype} is not numeric"
    if 0 in metadata.shape:
        return "the array is empty"
    if plane_plan(metadata) is not None:
        return None
    chunks, reads, read_bytes = plane_read_cost(metadata)
    if chunks > MAX_PREVIEW_CHUNKS:
        return f"its middle plane spans {chunks} chunks, more than a preview reads"
    if reads > MAX_PREVIEW_CHUNKS:
        return (
            f"its middle plane takes {reads} reads (chunks and shard indexes), more than a "
            "preview makes"
        )
    if read_bytes > MAX_PREVIEW_DECODED_BYTES:
        return (
            f"its middle plane's chunks and shard indexes hold {read_bytes >> 20} MiB, more "
            "than a preview reads"
        )
    return None
