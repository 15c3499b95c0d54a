"""A directory of an archive as a page: HTML links (what fsspec's HTTP file system parses, and
what a person sees in a browser) or JSON."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

from dandizarr_server.zarr_api.selectors.archive_contents import DirectoryNode


@dataclass(frozen=True)
class Entry:
    name: str
    is_directory: bool
    size: int
    digest: str


def entries(node: DirectoryNode) -> list[Entry]:
    """Directories first, then files, each by name."""
    listing = node.listing
    return [Entry(n, True, d.size, d.digest) for n, d in sorted(listing.directories.items())] + [
        Entry(n, False, f.size, f.digest) for n, f in sorted(listing.files.items())
    ]


def as_json(zarr_id: str, node: DirectoryNode) -> dict[str, Any]:
    prefix = f"{node.path}/" if node.path else ""
    return {
        "zarr_id": zarr_id,
        "path": node.path,
        "digest": node.listing.digest(),
        "size": node.listing.size,
        "file_count": node.listing.count,
        "entries": [
            {
                "type": "directory" if e.is_directory else "file",
                "name": e.name,
                "path": prefix + e.name,
                "size": e.size,
                "digest": e.digest,
            }
            for e in entries(node)
        ],
    }


def as_html(zarr_id: str, node: DirectoryNode) -> Iterator[str]:
    """The page, a row per entry. Links are relative (``name`` or ``name/``) and no other URL is
    on the page: fsspec takes every link and every absolute URL under the directory as an entry."""
    title = escape(f"{zarr_id}/{node.path}/" if node.path else f"{zarr_id}/")
    yield (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n"
        f"<p>{node.listing.count} files, {node.listing.size} bytes, "
        f"digest <code>{escape(node.listing.digest())}</code></p>\n"
        "<table>\n<tr><th>name</th><th>size (bytes)</th><th>digest</th></tr>\n"
    )
    if node.path:
        yield '<tr><td><a href="../">../</a></td><td></td><td></td></tr>\n'
    block: list[str] = []
    for entry in entries(node):
        suffix = "/" if entry.is_directory else ""
        href = quote(entry.name, safe="") + suffix
        block.append(
            f'<tr><td><a href="{href}">{escape(entry.name)}{suffix}</a></td>'
            f"<td>{entry.size}</td><td><code>{escape(entry.digest)}</code></td></tr>\n"
        )
        if len(block) == 1000:
            yield "".join(block)
            block = []
    yield "".join(block) + "</table>\n</body></html>\n"
