"""Neuroglancer's view of an archive's images and arrays: the viewer state (the JSON its URL
fragment holds) that opens them from the service's ``/zarr/`` routes.

One helper, ``viewer_link``, builds every link from the archive's base URL
(``https://host/zarr/{zarr_id}/``; a version's base URL works the same): ``zarr2://`` sources
for Zarr v2 (``zarr://`` would first probe for ``zarr.json``, a 404 in the console),
``zarr3://`` for v3 (``sharding_indexed`` included). An OME image is one
multiscale layer per channel drawn (Neuroglancer reads the levels, axes and units from the
metadata), the coordinate space its axes, units and voxel size, each channel in its colour
and window, the view centred.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from dandizarr.ome.model import Image
from dandizarr.ome.preview_choice import picture_axes

# Where the service serves Neuroglancer's client (the token segment is what the client needs
# in its path; see docs/neuroglancer.md).
VIEWER_PATH = "/neuroglancer/v/dandizarr/"

# NGFF's unit names (the spec's list, UDUNITS-2) as Neuroglancer's SI units and factors.
_SPACE_UNITS = {
    "angstrom": 1e-10, "attometer": 1e-18, "centimeter": 1e-2, "decimeter": 1e-1,
    "exameter": 1e18, "femtometer": 1e-15, "foot": 0.3048, "gigameter": 1e9,
    "hectometer": 1e2, "inch": 0.0254, "kilometer": 1e3, "megameter": 1e6, "meter": 1.0,
    "micrometer": 1e-6, "mile": 1609.344, "millimeter": 1e-3, "nanometer": 1e-9,
    "parsec": 3.0857e16, "petameter": 1e15, "picometer": 1e-12, "terameter": 1e12,
    "yard": 0.9144, "yoctometer": 1e-24, "yottameter": 1e24, "zeptometer": 1e-21,
    "zettameter": 1e21,
}  # fmt: skip
_TIME_UNITS = {
    "attosecond": 1e-18, "centisecond": 1e-2, "day": 86400.0, "decisecond": 1e-1,
    "exasecond": 1e18, "femtosecond": 1e-15, "gigasecond": 1e9, "hectosecond": 1e2,
    "hour": 3600.0, "kilosecond": 1e3, "megasecond": 1e6, "microsecond": 1e-6,
    "millisecond": 1e-3, "minute": 60.0, "nanosecond": 1e-9, "petasecond": 1e15,
    "picosecond": 1e-12, "second": 1.0, "terasecond": 1e12, "yoctosecond": 1e-24,
    "yottasecond": 1e24, "zeptosecond": 1e-21, "zettasecond": 1e21,
}  # fmt: skip
# Channels a link opens as layers (the first ones; the rest are added in the viewer).
MAX_CHANNEL_LAYERS = 8
# The picture a link opens: the data's larger plane side across about this many pixels.
_VIEW_PIXELS = 600


def neuroglancer_unit(unit: str | None, scale: float) -> tuple[float, str]:
    """``scale`` in ``unit`` as Neuroglancer's (factor, SI unit): 0.5 micrometer -> (5e-7, "m")."""
    if unit in _SPACE_UNITS:
        return scale * _SPACE_UNITS[unit], "m"
    if unit in _TIME_UNITS:
        return scale * _TIME_UNITS[unit], "s"
    return scale, ""


def source_url(base_url: str, path: str, zarr_format: int) -> str:
    """The Neuroglancer data source of the node at ``path`` of the archive at ``base_url``."""
    scheme = "zarr3" if zarr_format == 3 else "zarr2"
    url = base_url if base_url.endswith("/") else base_url + "/"
    if path:
        url += quote(path.strip("/"), safe="/") + "/"
    return f"{scheme}://{url}"


def _channel_shader(colour: str) -> str:
    return (
        "#uicontrol invlerp normalized\n"
        f'#uicontrol vec3 color color(default="#{colour.lower()}")\n'
        "void main() {\n  emitRGB(color * normalized());\n}\n"
    )


def image_state(image: Image, base_url: str) -> dict[str, Any]:
    """The viewer state of an OME image: one layer per channel drawn."""
    source = source_url(base_url, image.path, image.zarr_format)
    level = image.levels[0] if image.levels else None
    dimensions: dict[str, list[Any]] = {}
    position: list[float] = []
    for i, axis in enumerate(image.axes):
        if axis.type == "channel" or level is None or len(level.scale) != len(image.axes):
            continue
        factor, unit = neuroglancer_unit(axis.unit, level.scale[i])
        dimensions[axis.name] = [factor, unit]
        shape = level.shape[i] if i < len(level.shape) else 1
        offset = level.translation[i] / level.scale[i] if level.scale[i] else 0.0
        position.append(offset + shape / 2)
    channel_axis = image.axis_index("channel")
    layers: list[dict[str, Any]] = []
    if channel_axis is not None and image.channels:
        for i, channel in enumerate(image.channels[:MAX_CHANNEL_LAYERS]):
            layer: dict[str, Any] = {
                "type": "image",
                "source": source,
                "name": channel.label,
                "localPosition": [i],
                "shader": _channel_shader(channel.color),
                "blend": "additive",
                "visible": channel.active,
            }
            if channel.window is not None:
                layer["shaderControls"] = {"normalized": {"range": list(channel.window)}}
            layers.append(layer)
    else:
        layers.append(
            {"type": "image", "source": source, "name": image.name or image.path or "image"}
        )
    state: dict[str, Any] = {"layers": layers, "selectedLayer": {"layer": layers[0]["name"]}}
    if dimensions and len(position) == len(dimensions):
        state["dimensions"] = dimensions
        state["position"] = position
        # x across, y down, z into the screen (the axes' own order is z, y, x).
        space = [axis.name for axis in image.axes if axis.type == "space"]
        state["displayDimensions"] = space[::-1][:3]
    axes = picture_axes(image)
    if level is not None and axes is not None and len(level.shape) == len(image.axes):
        extent = max(level.shape[axes[0]], level.shape[axes[1]])
        state["crossSectionScale"] = max(extent / _VIEW_PIXELS, 1e-3)
    spatial = sum(1 for axis in image.axes if axis.type == "space")
    state["layout"] = "4panel" if spatial >= 3 else "xy"
    return state


def array_state(base_url: str, path: str, zarr_format: int, shape: Sequence[int]) -> dict[str, Any]:
    """The viewer state of a plain array: one image layer, its own coordinate space."""
    name = path.rsplit("/", 1)[-1] or "array"
    state: dict[str, Any] = {
        "layers": [
            {"type": "image", "source": source_url(base_url, path, zarr_format), "name": name}
        ],
        "selectedLayer": {"layer": name},
        "layout": "4panel" if len(shape) >= 3 else "xy",
    }
    if len(shape) >= 2:
        state["crossSectionScale"] = max(max(shape[-2:]) / _VIEW_PIXELS, 1e-3)
    return state


def viewer_link(state: dict[str, Any], viewer_path: str = VIEWER_PATH) -> str:
    """The link that opens ``state``: the viewer's page, the state in its fragment."""
    return viewer_path + "#!" + quote(json.dumps(state, separators=(",", ":")), safe="")
