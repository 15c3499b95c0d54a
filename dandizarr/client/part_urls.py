"""The part URLs of a batch of big files, a page at a time as the PUTs come to them (docs/api.md,
"Big files"): the service answers a start with each file's first page at most, and
``POST batches/{id}/parts/`` with the page from any part. A few pages are held, so memory does
not grow with a file's parts (up to S3's 10,000), and a page is asked for again once it is half
as old as the service's URLs live, or when storage refused one of its URLs as expired: a URL is
fresh when its PUT starts, however long the upload of a 5 TiB file takes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import ClientError

# Pages held at once, over all files: the PUTs in flight reach into a page or two.
PAGES_HELD = 8


@dataclass(frozen=True)
class _Page:
    first: int
    urls: list[str]
    taken: float  # time.monotonic() when the service answered it

    def covers(self, number: int) -> bool:
        return self.first <= number < self.first + len(self.urls)


class PartUrls:
    """The URL of each part of a batch's big files, from a start's (or add's) ``answer``;
    ``fresh_for``: seconds a URL is used after the service issued it (half their lifetime)."""

    def __init__(
        self,
        client: ApiClient,
        zarr_id: str,
        answer: list[dict[str, Any]],
        parts: Mapping[str, int],
        *,
        fresh_for: float,
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.fresh_for = fresh_for
        self._batches: dict[str, int | None] = {}
        self._pages: OrderedDict[tuple[str, int], _Page] = OrderedDict()
        self._lock = threading.Lock()
        now = time.monotonic()
        for entry in answer:
            path = str(entry["path"])
            count = entry.get("part_count", len(entry.get("part_urls") or []))
            if path not in parts or count != parts[path]:
                raise ClientError(f"the server answered other parts for {path} than declared")
            batch = entry.get("batch")
            self._batches[path] = batch if isinstance(batch, int) else None
            if entry.get("part_urls"):
                self._hold(path, _Page(int(entry.get("first_part", 1)), entry["part_urls"], now))

    def url(self, path: str, number: int, *, renew: bool = False) -> str:
        """The URL of part ``number`` of ``path``: a held one still fresh, else (or with
        ``renew``: storage refused the last one) from a fresh page from that part."""
        with self._lock:
            if not renew:
                for (held, _), page in self._pages.items():
                    if (
                        held == path
                        and page.covers(number)
                        and time.monotonic() - page.taken < self.fresh_for
                    ):
                        return page.urls[number - page.first]
            page = self._fetch(path, number)
            self._hold(path, page)
            return page.urls[0]

    def _fetch(self, path: str, number: int) -> _Page:
        batch = self._batches.get(path)
        if batch is None:  # a service that handed out every part URL at the start
            raise ClientError(f"the server gave no URL for part {number} of {path}")
        answer = self.client.part_urls(self.zarr_id, batch, path, number)
        urls = answer.get("part_urls")
        if answer.get("first_part") != number or not isinstance(urls, list) or not urls:
            raise ClientError(f"the server answered no URL for part {number} of {path}")
        return _Page(number, urls, time.monotonic())

    def _hold(self, path: str, page: _Page) -> None:
        self._pages[(path, page.first)] = page
        self._pages.move_to_end((path, page.first))
        while len(self._pages) > PAGES_HELD:
            self._pages.popitem(last=False)
