"""The Zarr arrays of an archive: found through its ``.checksum`` tree, described, and opened
with the sharding library's ``Array`` (Zarr v3 as it is; Zarr v2 as the v3 array it is
equivalent to: the same chunk bytes under ``v2`` chunk keys, its compressor as a codec).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dandizarr.ome import MAX_LISTED, dtype_name
from dandizarr.sharding.array_documents import (
    ARRAY_V2,
    ARRAY_V3,
    ArrayDocument,
    MetadataError,
    parse_document,
)
from dandizarr.sharding.array_metadata import ArrayMetadata, metadata_ints
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec, CodecJSON, codec_name_config
from dandizarr.sharding.index import as_index_codecs
from dandizarr.sharding.metadata_values import shown
from dandizarr_server.zarr_api.pages.preview import PREVIEW_SIDE

logger = logging.getLogger(__name__)

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


class Unsupported(MetadataError):
    """The array's metadata or codecs are not ones this service reads, or it has no preview
    (the library's one metadata error, as the pages meet it)."""


# What a page says of an array whose metadata no reader could describe: the boundary's
# backstop (``describe_document``), never the readers' own refusals, which name the problem.
CANNOT_DESCRIBE = "this array cannot be described"
# A codec as the page names it (its name and configuration): at most this many characters.
MAX_CODEC_TEXT = 200


@dataclass(frozen=True)
class ArrayInfo:
    path: str  # the array's directory in the archive ("" for an archive that is one array)
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    # Compressor, filters or codecs, as "name(config)": the first MAX_LISTED of them.
    codecs: tuple[str, ...]
    # "sharding_indexed: inner chunks (a, b)" for a v3 sharded array.
    sharding: str | None
    # The array as v3 metadata for reading, or why it has no preview.
    metadata: ArrayMetadata | None
    preview_problem: str | None
    codecs_more: int = 0  # codecs (filters, compressor) past those listed

    @property
    def metadata_name(self) -> str:
        return ".zarray" if self.zarr_format == 2 else "zarr.json"

    @classmethod
    def undescribed(cls, path: str, zarr_format: int, problem: str) -> ArrayInfo:
        """An array the page names with why it cannot say more."""
        return cls(path, zarr_format, (), (), "?", (), None, None, problem)


def _codec_text(name: Any, config: Any) -> str:
    """A codec as the page names it: ``name(key=value, ...)``, at most MAX_CODEC_TEXT
    characters whatever its configuration holds."""
    label = name if isinstance(name, str) and len(name) <= MAX_CODEC_TEXT else shown(name)
    items = list(config.items())[:MAX_LISTED] if isinstance(config, Mapping) else []
    settings = ", ".join(
        f"{shown(k) if not isinstance(k, str) else k[:40]}={shown(v)}"
        for k, v in items
        if k not in ("id", "name")
    )
    text = f"{label}({settings})" if settings else label
    return text if len(text) <= MAX_CODEC_TEXT else text[: MAX_CODEC_TEXT - 1] + "…"


def _listed(texts: Sequence[str], total: int) -> tuple[tuple[str, ...], int]:
    """The first MAX_LISTED of ``texts`` and how many of ``total`` are not shown."""
    shown_texts = tuple(texts[:MAX_LISTED])
    return shown_texts, total - len(shown_texts)


def _v2_codecs(doc: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    filters = doc.get("filters")
    listed = [*(filters if isinstance(filters, list) else []), doc.get("compressor")]
    objects = [c for c in listed if isinstance(c, Mapping)]
    texts = [_codec_text(c.get("id"), c) for c in objects[:MAX_LISTED]]
    return _listed(texts, len(objects))


def _v3_codecs(doc: Mapping[str, Any]) -> tuple[tuple[str, ...], int, str | None]:
    """(the first codecs as named, how many more, the sharding line)."""
    codecs = doc.get("codecs")
    codecs = codecs if isinstance(codecs, list) else []
    names: list[str] = []
    sharding = None
    for codec in codecs[:MAX_LISTED]:
        name, config = (codec, {}) if isinstance(codec, str) else (_get(codec, "name"), codec)
        config = _get(config, "configuration") or {}
        if name == "sharding_indexed" and isinstance(config, Mapping):
            inner = config.get("codecs")
            inner = inner if isinstance(inner, list) else []
            inner_names, more = _listed(
                [
                    _codec_text(_get(c, "name") if isinstance(c, Mapping) else c, {})
                    for c in inner[:MAX_LISTED]
                ],
                len(inner),
            )
            sharding = (
                f"sharding_indexed: inner chunks {_shape_text(config.get('chunk_shape'))}, "
                f"inner codecs {', '.join(inner_names)}{f' and {more} more' if more else ''}"
            )
            names.append(name)
        else:
            names.append(_codec_text(name, config))
    listed, more = _listed(names, len(codecs))
    return listed, more, sharding


def _shape_text(value: Any) -> str:
    try:
        return str(metadata_ints(value, "chunk_shape"))
    except MetadataError:
        return shown(value)


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None


def describe(path: str, name: str, raw: bytes) -> ArrayInfo | None:
    """The array whose metadata file ``path/name`` holds ``raw``; None for a group or a file
    that is no JSON object."""
    try:
        return describe_document(path, name, parse_document(raw))
    except MetadataError:
        return None


def describe_document(path: str, name: str, doc: Mapping[str, Any]) -> ArrayInfo | None:
    """The array whose metadata file ``path/name`` parsed to ``doc``; None for a group (the
    library's one reader: dandizarr.sharding.array_documents). Never raises: the readers
    are total (a value, or MetadataError, which names the problem on the page), and anything
    else (a reader's bug) is the boundary's CANNOT_DESCRIBE, logged, so a page is a 200
    whose description is cached like any other."""
    zarr_format = 2 if name == ARRAY_V2 else 3
    if name == ARRAY_V3 and _get(doc, "node_type") != "array":
        return None
    try:
        return _described(path, name, zarr_format, doc)
    except MetadataError as error:
        return ArrayInfo.undescribed(path, zarr_format, str(error)[:MAX_PROBLEM_TEXT])
    except Exception as error:  # the backstop: a reader's bug is no 500 and is cached
        logger.warning("%s/%s: %s", path, name, CANNOT_DESCRIBE, exc_info=True)
        return ArrayInfo.undescribed(
            path, zarr_format, f"{CANNOT_DESCRIBE} ({type(error).__name__})"
        )


# A problem as the page says it, at most this many characters (messages name values by
# ``shown``; this bounds what the rest of a message adds).
MAX_PROBLEM_TEXT = 500


def _described(path: str, name: str, zarr_format: int, doc: Mapping[str, Any]) -> ArrayInfo:
    array = ArrayDocument.from_json(name, doc)
    assert array is not None  # a v3 group was answered by the caller
    if zarr_format == 2:
        codecs, more = _v2_codecs(doc)
        sharding = None
    else:
        codecs, more, sharding = _v3_codecs(doc)
    dtype = dtype_name(zarr_format, doc.get("dtype" if zarr_format == 2 else "data_type"))
    metadata: ArrayMetadata | None = None
    try:
        metadata = array.v3_metadata()
        spec = ArraySpec(metadata.chunk_shape, metadata.dtype, metadata.fill_value)
        pipeline_from_json(metadata.codecs, spec)
        problem = _plane_problem(metadata)
    except MetadataError as error:
        problem = str(error)[:MAX_PROBLEM_TEXT] or type(error).__name__
    return ArrayInfo(
        path, zarr_format, array.shape, array.chunks, dtype, codecs, sharding,
        metadata if problem is None else None, problem, more,
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
    chunks but of whole shards, decoded (decompressed) whole before any index is seen. A loop
    down the levels (as many as the chain was built with: MAX_CODEC_NESTING at most)."""
    chain: Any = codecs
    while isinstance(chain, list):
        names = [codec_name_config(codec)[0] for codec in chain]
        if "sharding_indexed" not in names:
            return None
        if len(names) > 1:
            others = ", ".join(name for name in names if name != "sharding_indexed")
            return (
                f"sharding_indexed is not its chain's only codec ({others} around it): whole "
                "shards would be decoded, which a preview does not do"
            )
        chain = codec_name_config(chain[0])[1].get("codecs")
    return None


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
