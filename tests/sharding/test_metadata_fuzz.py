"""Every reader of an uploader's metadata in the libraries is total and bounded, proved by a
fuzzer rather than a list (issue #47): for any ``zarr.json``, ``.zarray``, ``.zattrs``,
``.zgroup`` or ``.zmetadata`` (tests/support/metadata_strategies.py: any JSON, and valid
documents with hostile values anywhere), each reader returns a value or raises the one
``MetadataError`` (readers whose contract is "never raises": nothing at all), each call under
tests/support/cost_bounds.py's CPU and memory bound.

The readers: the document parser; the array documents, v2 and v3, and their v3 metadata;
``ArrayMetadata.from_json``; the fill value of every data type; the codec chain built from
the metadata (nesting checked first); data type names; the archive packing's chunk grid;
the OME description, its validation, its JSON, the preview's choice and Neuroglancer's state.
Consolidated metadata (``.zmetadata``) has no reader of its own here: its documents are read
as a consolidated reader would, each by the readers of its name.

``make test`` runs LIBRARY_EXAMPLES examples; ``make fuzz`` FUZZ_EXAMPLES (seed printed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dandizarr.ome import describe, dtype_name
from dandizarr.ome import neuroglancer_state as ng
from dandizarr.ome.preview_choice import choose
from dandizarr.ome.validation import validate
from dandizarr.sharding.archive_packing.chunk_grids import PackingError, grid_from_metadata
from dandizarr.sharding.array import Array
from dandizarr.sharding.array_documents import (
    ARRAY_V2,
    ARRAY_V3,
    ArrayDocument,
    MetadataError,
    parse_document,
)
from dandizarr.sharding.array_metadata import DATA_TYPES, ArrayMetadata, parse_fill_value
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec
from dandizarr.sharding.metadata_values import check_codecs
from dandizarr.sharding.store import MemoryStore
from tests.support.cost_bounds import Refused, bounded, traced_memory
from tests.support.hypothesis_profiles import fuzz_examples
from tests.support.metadata_strategies import (
    ATTRIBUTES_V2,
    CONSOLIDATED,
    GROUP_V2,
    NAMES,
    V2_LEVEL,
    document_files,
    documents_of,
    ome_v04,
    v3_group,
)

LIBRARY_EXAMPLES = 2000
# What a validation reads at most (the service's pages.archive_scan.MAX_VALIDATED_BYTES):
# pydantic costs about half a CPU-second a megabyte, so a call's bound needs one.
VALIDATED_BYTES = 256 << 10
# A consolidated document's entries read, at most.
CONSOLIDATED_ENTRIES = 8

FUZZ = settings(
    max_examples=fuzz_examples(LIBRARY_EXAMPLES),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def read_array(name: str, doc: Any) -> None:
    """The array readers of a document of file ``name`` (either name: a reader is handed
    whatever a file holds)."""
    for as_name in (ARRAY_V2, ARRAY_V3):
        array = bounded(ArrayDocument.from_json, as_name, doc, allowed=(MetadataError,))
        if array is None or isinstance(array, Refused):
            continue
        bounded(lambda a=array: a.itemsize)
        bounded(lambda a=array: a.inner_chunks)
        metadata = bounded(array.v3_metadata, allowed=(MetadataError,))
        if isinstance(metadata, ArrayMetadata):
            spec = ArraySpec(metadata.chunk_shape, metadata.dtype, metadata.fill_value)
            bounded(pipeline_from_json, metadata.codecs, spec, allowed=(MetadataError,))
            bounded(Array, MemoryStore(), "a", metadata, allowed=(MetadataError,))
    if isinstance(doc, Mapping):
        bounded(ArrayMetadata.from_json, doc, allowed=(MetadataError,))
        fill = doc.get("fill_value")
        for dtype in DATA_TYPES.values():
            bounded(parse_fill_value, fill, dtype, allowed=(MetadataError,))
        bounded(check_codecs, doc.get("codecs"), allowed=(MetadataError,))
        bounded(dtype_name, 2, doc.get("dtype"))
        bounded(dtype_name, 3, doc.get("data_type"))


def read_ome(name: str, doc: Mapping[str, Any]) -> None:
    """The OME readers over an image whose group (``name`` a group's file) or level (an
    array's) is ``doc``, the rest valid. None of them raises: a problem is described."""
    docs: dict[str, Any]
    if name == ARRAY_V3 and doc.get("node_type") == "group":
        docs = {ARRAY_V3: doc}
    elif name == ARRAY_V3:
        docs = {ARRAY_V3: v3_group(), f"s0/{ARRAY_V3}": doc}
    else:
        attributes = ome_v04() if name == ARRAY_V2 else doc
        level = doc if name == ARRAY_V2 else V2_LEVEL
        docs = {GROUP_V2: {"zarr_format": 2}, ATTRIBUTES_V2: attributes, f"s0/{ARRAY_V2}": level}
    summary = bounded(describe, docs)
    summary = bounded(validate, docs, summary, VALIDATED_BYTES)
    bounded(lambda: json.dumps(summary.as_json()))
    for image in summary.images:
        bounded(choose, image, 512, lambda level, planes: True)
        state = bounded(ng.image_state, image, "http://host/zarr/x/")
        bounded(ng.viewer_link, state)


def read_document(name: str, doc: Any) -> None:
    read_array(name, doc)
    if isinstance(doc, Mapping):
        read_ome(name, doc)
    if name == CONSOLIDATED and isinstance(doc, Mapping):
        entries = doc.get("metadata")
        for key, inner in list(entries.items() if isinstance(entries, Mapping) else [])[
            :CONSOLIDATED_ENTRIES
        ]:
            inner_name = key.rpartition("/")[2] if isinstance(key, str) else ""
            read_document(inner_name if inner_name in NAMES else ARRAY_V3, inner)


@FUZZ
@given(name=st.sampled_from(NAMES), data=st.data())
def test_every_library_reader_is_total_and_bounded(name: str, data: st.DataObject) -> None:
    raw = data.draw(document_files(name), label="file")
    with traced_memory():
        parsed = bounded(parse_document, raw, allowed=(MetadataError,))
        if not isinstance(parsed, Refused):
            read_document(name, parsed)
        bounded(grid_from_metadata, "a", name, raw, allowed=(PackingError,))
    # The readers that take parsed documents, handed one no parser made (any depth, any
    # value: a library caller's).
    direct = data.draw(documents_of(name), label="document")
    with traced_memory():
        read_document(name, direct)


def test_a_valid_level_is_read() -> None:
    """The fuzzer's skeletons are read (else it tests refusals only): its v2 level is an
    array with v3 metadata, and its image is described."""
    array = ArrayDocument.from_json(ARRAY_V2, V2_LEVEL)
    assert array is not None and array.v3_metadata().dtype.name == "uint16"
    docs = {GROUP_V2: {"zarr_format": 2}, ATTRIBUTES_V2: ome_v04(), f"s0/{ARRAY_V2}": V2_LEVEL}
    (image,) = describe(docs).images
    assert image.levels[0].shape == (2, 64, 64)
