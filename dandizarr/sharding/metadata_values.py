"""What a value in an uploader's metadata may be, checked before anything interprets it.

Every reader of metadata documents (array documents v2 and v3, codecs and their nesting, fill
values, data types, the OME description) either returns a value or raises ``MetadataError``,
the one error of malformed metadata (its subclasses say where it was found). Three rules make
that hold by construction rather than case by case:

- Nesting is bounded before it is interpreted, by walks that are themselves iterative: a
  document past MAX_JSON_DEPTH levels (``check_nesting``), codecs nested past
  MAX_CODEC_NESTING or more than MAX_CODECS in all (``check_codecs``). No reader recurses as
  deep as a document says.
- Every number goes through ``metadata_int`` (counts, extents, levels) or ``metadata_number``
  (a scalar of a data type: fill values), which convert a JSON number to the type it is read as
  within that type's range, or refuse it. ``Infinity`` for an integer, ``10**400`` for a
  float32 and ``"0x"`` for a float are refusals, never an OverflowError or an IndexError.
- A message names a value by ``shown``: a short prefix, whatever the value (the decimal text
  of a 10**5000 integer is itself an error in Python, and a refusal never echoes a megabyte).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_CODECS",
    "MAX_CODEC_NESTING",
    "MAX_JSON_DEPTH",
    "MetadataError",
    "check_codecs",
    "check_nesting",
    "is_int",
    "metadata_int",
    "metadata_number",
    "shown",
]


class MetadataError(ValueError):
    """An array's or a group's metadata is malformed or not readable here (the uploader's
    doing, not a bug): the one error every reader of metadata raises."""


# How deep a metadata document may nest: real documents nest about ten levels (an OME 0.5
# zarr.json: attributes, ome, multiscales, datasets, coordinateTransformations, scale), a
# sharded array's codecs three per sharding level. Past this a document is refused whole.
MAX_JSON_DEPTH = 64
# A metadata file (``.zarray``, ``zarr.json``...) past this size is not read: no honest one
# comes near it (the pages' archive scan, the repacking of a session's chunk files).
MAX_METADATA_BYTES = 1 << 20
# Codec chains: how many sharding levels (a chain inside a codec's configuration, ``codecs``
# or ``index_codecs``) and codecs in all levels together. Real arrays shard once or twice and
# chain a handful of codecs.
MAX_CODEC_NESTING = 4
MAX_CODECS = 64
# How much of a value a message shows.
MAX_SHOWN_CHARS = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = MAX_SHOWN_CHARS
# Past this an integer is shown by its size: its decimal text costs quadratic time and past
# 4300 digits is refused by Python itself.
_LONGEST_SHOWN_INT = 10**30


def shown(value: Any) -> str:
    """``value`` as a message shows it: its repr, at most MAX_SHOWN_CHARS characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LONGEST_SHOWN_INT:
        return f"a {value.bit_length()}-bit integer"
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # an integer too long for its decimal text, inside
        text = f"a {type(value).__name__}"
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


# What nests in parsed JSON (a tuple too, in a document a library caller built).
_CONTAINERS = (dict, list, tuple)


def check_nesting(value: Any, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """MetadataError when ``value`` (parsed JSON: dicts and lists) nests more than ``limit``
    deep (``{}`` or ``[]`` is one level). Iterative, a level at a time: any depth costs one
    pass over the containers (about 15 ms for a megabyte of 80,000 objects), no stack."""
    level = [value] if isinstance(value, Mapping | list | tuple) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise MetadataError(f"{what} nests deeper than {limit} levels")
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, Mapping) else item)
            if isinstance(child, _CONTAINERS)
        ]


def check_codecs(codecs: Any, what: str = "codecs") -> Sequence[Any]:
    """``codecs``; MetadataError unless it (a chain's JSON) is a list whose chains (those in
    its codecs' configurations: a ``sharding_indexed`` codec's ``codecs`` and ``index_codecs``)
    nest at most MAX_CODEC_NESTING deep and hold at most MAX_CODECS codecs in all. Iterative,
    before any codec is built: building them recurses once per level."""
    stack = [(codecs, 0)]
    total = 0
    while stack:
        chain, level = stack.pop()
        if not isinstance(chain, list | tuple):
            raise MetadataError(f"{what}: a codec chain must be a list, got {shown(chain)}")
        if level > MAX_CODEC_NESTING:
            raise MetadataError(f"{what} nest more than {MAX_CODEC_NESTING} levels deep")
        total += len(chain)
        if total > MAX_CODECS:
            raise MetadataError(f"{what}: more than {MAX_CODECS} codecs")
        for codec in chain:
            config = codec.get("configuration") if isinstance(codec, Mapping) else None
            if not isinstance(config, Mapping):
                continue
            for key in ("codecs", "index_codecs"):
                inner = config.get(key)
                if isinstance(inner, list | tuple):
                    stack.append((inner, level + 1))
    return codecs  # a list or tuple: checked first


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer as JSON has them (not a bool, not a float)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def metadata_int(value: Any, what: str, low: int, high: int) -> int:
    """``value`` (a JSON integer: not a float, not a bool) as an int within ``low..high``;
    MetadataError otherwise."""
    if not is_int(value):
        raise MetadataError(f"{what} must be an integer, got {shown(value)}")
    if not low <= value <= high:
        raise MetadataError(f"{what} {shown(int(value))} is out of range ({low}..{high})")
    return int(value)


_FLOAT_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float(value: Any, dtype: np.dtype[Any], what: str) -> Any:
    """A float scalar of ``dtype``: a JSON number within its range, NaN, Infinity and
    -Infinity (as JSON's names or Python's non-standard tokens), or ``0x`` and the big-endian
    hex of exactly its bytes."""
    if isinstance(value, str):
        if value in _FLOAT_NAMES:
            return dtype.type(_FLOAT_NAMES[value])
        digits = value[2:] if value.startswith("0x") else None
        if digits is None or len(digits) != 2 * dtype.itemsize:
            raise MetadataError(f"{what} {shown(value)} is no {dtype} (a number or 0x and hex)")
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            raise MetadataError(f"{what} {shown(value)} is not hexadecimal") from None
        return np.frombuffer(raw, dtype=dtype.newbyteorder(">"))[0].astype(dtype)
    if is_int(value):
        if abs(int(value)) > int(np.finfo(dtype).max):
            raise MetadataError(f"{what} {shown(int(value))} is out of range for {dtype}")
        value = float(value)
    if not isinstance(value, float | np.floating):
        raise MetadataError(f"{what} must be a number for {dtype}, got {shown(value)}")
    with np.errstate(over="ignore"):
        scalar = dtype.type(value)
    if math.isinf(scalar) and math.isfinite(value):
        raise MetadataError(f"{what} {shown(float(value))} is out of range for {dtype}")
    return scalar


def metadata_number(value: Any, dtype: np.dtype[Any], what: str) -> Any:
    """``value`` (JSON) as a numpy scalar of ``dtype`` (bool, integer, float or complex),
    within its range; MetadataError when it is not one. An integer type takes an integral
    float (``0.0``); a complex one a pair of floats."""
    if dtype.kind == "b":
        if not isinstance(value, bool | np.bool_):
            raise MetadataError(f"{what} must be true or false, got {shown(value)}")
        return np.bool_(value)
    if dtype.kind in "iu":
        if isinstance(value, float | np.floating) and math.isfinite(value) and value.is_integer():
            value = int(value)
        info = np.iinfo(dtype)
        return dtype.type(metadata_int(value, f"{what} for {dtype}", int(info.min), int(info.max)))
    if dtype.kind == "f":
        return _float(value, dtype, what)
    if dtype.kind == "c":
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise MetadataError(f"{what} must be [real, imaginary] for {dtype}, got {shown(value)}")
        part = np.dtype(f"f{dtype.itemsize // 2}")
        real, imaginary = (_float(v, part, what) for v in value)
        return dtype.type(complex(real, imaginary))
    raise MetadataError(f"{what}: data type {dtype} has no numbers read here")
