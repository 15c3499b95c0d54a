"""Work on a thread pool, its results taken in order with a bounded look-ahead: hashing files,
reading members, building shards. Pure (no Django, nothing of the client): the bottom layer."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Executor, Future
from typing import TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    pool: Executor, fn: Callable[[T], R], items: Iterable[T], *, ahead: int
) -> Generator[R, None, None]:
    """``fn`` of each item, in order, run on ``pool`` at most ``ahead`` items ahead of the one
    taken: unlike ``pool.map``, which submits every item at once, memory stays bounded however
    long ``items`` is. An error raised by ``fn`` is raised where its result is taken. Closing
    the generator (or an error) cancels the calls not yet started."""
    queued: deque[Future[R]] = deque()
    try:
        for item in items:
            queued.append(pool.submit(fn, item))
            if len(queued) >= max(1, ahead):
                yield queued.popleft().result()
        while queued:
            yield queued.popleft().result()
    finally:
        for future in queued:
            future.cancel()
