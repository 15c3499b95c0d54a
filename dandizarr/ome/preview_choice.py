"""What a preview of an OME image draws: which level, which plane, which channels in which
colours and windows.

The level is the smallest that still fills the picture (its larger plane side at least the
picture's side; the largest level when none does), among those the caller's budget allows;
the plane is the middle of every axis but the channel axis and the last two space axes (the
middle z-plane of a t/c/z/y/x image, its middle time point); the channels are the active ones
of ``omero`` (all when none is marked), at most ``MAX_CHANNELS``, each in its colour and
window; without ``omero``, the first channel in grey, scaled to its range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dandizarr.ome.model import Image, Level

MAX_CHANNELS = 4


@dataclass(frozen=True)
class ChannelDraw:
    index: int | None  # along the channel axis; None when the image has none
    color: tuple[int, int, int]  # 0-255 each
    window: tuple[float, float] | None  # None: the plane's own minimum and maximum


@dataclass(frozen=True)
class PreviewChoice:
    level: Level
    # Per channel drawn, the selection of the level array: ints, and None for the two axes
    # of the picture (rows, columns).
    selections: tuple[tuple[int | None, ...], ...]
    channels: tuple[ChannelDraw, ...]


def picture_axes(image: Image) -> tuple[int, int] | None:
    """(rows, columns): the last two space axes (y, x), else the last two axes."""
    rank = len(image.axes)
    if rank < 2:
        return None
    space = [i for i, axis in enumerate(image.axes) if axis.type == "space"]
    if len(space) >= 2:
        return space[-2], space[-1]
    return rank - 2, rank - 1


def _colour(hex_digits: str) -> tuple[int, int, int]:
    value = int(hex_digits, 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255


def _channels(image: Image) -> tuple[ChannelDraw, ...]:
    channel_axis = image.axis_index("channel")
    if channel_axis is None:
        return (ChannelDraw(None, (255, 255, 255), None),)
    if not image.channels:
        return (ChannelDraw(0, (255, 255, 255), None),)
    chosen = [i for i, c in enumerate(image.channels) if c.active] or list(
        range(len(image.channels))
    )
    if len(chosen) == 1:  # one channel: grey shows it best
        channel = image.channels[chosen[0]]
        return (ChannelDraw(chosen[0], (255, 255, 255), channel.window),)
    return tuple(
        ChannelDraw(i, _colour(image.channels[i].color), image.channels[i].window)
        for i in chosen[:MAX_CHANNELS]
    )


def choose(
    image: Image, side: int, affordable: Callable[[Level, int], bool]
) -> PreviewChoice | None:
    """The preview of ``image`` at ``side`` pixels; ``affordable(level, planes)`` says whether
    reading ``planes`` planes of ``level`` stays within the caller's budget. None when the
    image has no plane to draw or no level is affordable."""
    axes = picture_axes(image)
    rank = len(image.axes)
    levels = [level for level in image.levels if len(level.shape) == rank and 0 not in level.shape]
    if axes is None or not levels:
        return None
    channels = _channels(image)
    rows, columns = axes
    # Largest first; start at the smallest level that fills the picture (the largest when
    # none does), and fall back to smaller ones when the budget refuses it.
    by_size = sorted(levels, key=lambda lv: lv.shape[rows] * lv.shape[columns], reverse=True)
    filling = [i for i, lv in enumerate(by_size) if max(lv.shape[rows], lv.shape[columns]) >= side]
    order = by_size[filling[-1] :] if filling else by_size
    channel_axis = image.axis_index("channel")
    for level in order:
        if not affordable(level, len(channels)):
            continue
        selections = []
        for channel in channels:
            selection: list[int | None] = []
            for i, n in enumerate(level.shape):
                if i in axes:
                    selection.append(None)
                elif i == channel_axis and channel.index is not None:
                    selection.append(min(channel.index, n - 1))
                else:
                    selection.append(n // 2)
            selections.append(tuple(selection))
        return PreviewChoice(level, tuple(selections), channels)
    return None
