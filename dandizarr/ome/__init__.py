"""OME-NGFF (OME-Zarr) read from a hierarchy's metadata documents: images with their levels,
axes, units, channels and labels; plates, wells and label collections; what the spec says of
each (``dandizarr.ome.validation``, which needs the ``ome`` extra: ome-zarr-models); what a
preview draws; Neuroglancer's view of it. Pure: no Django, no client, no storage."""

from dandizarr.ome.describe import describe
from dandizarr.ome.documents import DOCUMENT_NAMES, Documents, Node, node, nodes, parse_document
from dandizarr.ome.dtypes import MAX_LISTED, dtype_name
from dandizarr.ome.model import (
    Axis,
    Channel,
    Collection,
    Image,
    Level,
    Problem,
    Summary,
    Validation,
)

__all__ = [
    "DOCUMENT_NAMES",
    "MAX_LISTED",
    "Axis",
    "Channel",
    "Collection",
    "Documents",
    "Image",
    "Level",
    "Node",
    "Problem",
    "Summary",
    "Validation",
    "describe",
    "dtype_name",
    "node",
    "nodes",
    "parse_document",
]
