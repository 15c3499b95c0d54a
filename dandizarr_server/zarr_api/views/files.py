"""Views of an archive's files: browsing the .checksum tree, downloads, deleting files."""

from __future__ import annotations

from itertools import islice
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponseBase, HttpResponseRedirect
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from dandizarr.objectstore.signing import quote_key
from dandizarr_server.zarr_api.domain.paths import directory_problem
from dandizarr_server.zarr_api.domain.permissions import require_writer
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.edge.throttles import expensive_read_throttles
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.parsers.paging import page_request, query_positive_int
from dandizarr_server.zarr_api.parsers.upload_batch import parse_deleted_paths
from dandizarr_server.zarr_api.runtime.storage import download_url, download_urls
from dandizarr_server.zarr_api.selectors.archive_contents import (
    DirectoryNode,
    FileNode,
    files_below,
    node_get,
)
from dandizarr_server.zarr_api.selectors.file_bytes import stored_bytes
from dandizarr_server.zarr_api.selectors.lookups import archive_for_write, archive_get
from dandizarr_server.zarr_api.selectors.shard_members import (
    MemberLocation,
    member_location,
    member_locations,
)
from dandizarr_server.zarr_api.services.deletions import files_delete
from dandizarr_server.zarr_api.views.file_responses import file_response
from dandizarr_server.zarr_api.views.paging import page_links


def version_read_url(request: HttpRequest, archive: ZarrArchive, path: str) -> str:
    """Where a version's file is read: ``/zarr/{version_id}/{path}``."""
    assert archive.as_of is not None
    return request.build_absolute_uri(f"/zarr/{archive.as_of.version_id}/{quote_key(path)}")


def file_download(request: HttpRequest, archive: ZarrArchive, node: FileNode) -> HttpResponseBase:
    """A file's bytes to save: a loose file's presigned storage URL (its reply labelled as user
    bytes, objectstore.user_bytes), a packed file's (or a version's file's) bytes as ``/zarr/``
    serves them."""
    if archive.as_of is None and member_location(archive, node.path) is None:
        return HttpResponseRedirect(download_url(archive.storage_prefix + node.path))
    return file_response(request, archive, node.path, attachment=True)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name) in {"1", "true", "yes"}


def _shard(location: MemberLocation | None) -> dict[str, Any] | None:
    """A file entry's ``shard``: where a packed file's bytes are in its shard object."""
    if location is None:
        return None
    return {"key": location.key, "offset": location.offset, "length": location.length}


class FilesView(APIView):
    """Browse an archive (GET, from the .checksum tree) and delete files (DELETE)."""

    def get_throttles(self) -> list[BaseThrottle]:
        """A recursive listing (every file below, URLs signed) is an expensive read."""
        return expensive_read_throttles(self.request, _flag(self.request, "recursive"))

    @extend_schema(
        parameters=[
            OpenApiParameter("page", int),
            OpenApiParameter("page_size", int),
            OpenApiParameter("recursive", bool, description="every file below, in path order"),
            OpenApiParameter("after", str, description="cursor for recursive listings"),
            OpenApiParameter("limit", int),
            OpenApiParameter("urls", bool, description="recursive: with download_url, shard"),
            OpenApiParameter("download", bool, description="redirect to the file's bytes"),
        ]
    )
    def get(self, request: Request, zarr_id: str, path: str = "") -> Response | HttpResponseBase:
        archive = archive_get(zarr_id, request.user)
        problem = directory_problem(path)
        if problem:
            raise ValidationFailed(f"path {path!r} {problem}")
        if _flag(request, "recursive"):
            return self._recursive(request, archive, path)
        node = node_get(archive, path)
        if isinstance(node, FileNode):
            if _flag(request, "download"):
                return file_download(request, archive, node)
            if archive.as_of is not None:
                return Response({**self._version_file(request, archive, node), "shard": None})
            location = member_location(archive, node.path)
            if location is not None:
                return Response({**self._file(node, location.key), "shard": _shard(location)})
            key = archive.storage_prefix + node.path
            return Response({**self._file(node, key), "shard": None})
        return Response(self._directory(request, node))

    @staticmethod
    def _file(node: FileNode, key: str, url: str | None = None) -> dict[str, Any]:
        """A file's entry; ``key`` is its object (a packed file's: its shard's), ``url`` where
        it downloads (default: the object's storage URL)."""
        return {
            "type": "file",
            "path": node.path,
            "name": node.path.rsplit("/", 1)[-1],
            "size": node.size,
            "digest": node.md5,
            "s3_key": key,
            "download_url": url or download_url(key),
        }

    def _version_file(
        self, request: Request, archive: ZarrArchive, node: FileNode
    ) -> dict[str, Any]:
        """A version's file: its bytes are read through the service (they may be an object
        version the draft replaced)."""
        found = stored_bytes(archive, node.path)
        return self._file(node, found.key, version_read_url(request, archive, node.path))

    def _directory(self, request: Request, node: DirectoryNode) -> dict[str, Any]:
        listing = node.listing
        prefix = f"{node.path}/" if node.path else ""
        entries = [
            {"type": "directory", "name": n, "path": prefix + n, "digest": d.digest, "size": d.size}
            for n, d in sorted(listing.directories.items())
        ] + [
            {"type": "file", "name": n, "path": prefix + n, "digest": f.digest, "size": f.size}
            for n, f in sorted(listing.files.items())
        ]
        page = page_request(request.query_params)
        return {
            "type": "directory",
            "path": node.path,
            "name": node.path.rsplit("/", 1)[-1],
            "digest": listing.digest(),
            "size": listing.size,
            "file_count": listing.count,
            **page_links(request, page, len(entries)),
            "results": entries[page.start : page.stop],
        }

    def _recursive(self, request: Request, archive: ZarrArchive, path: str) -> Response:
        limit = query_positive_int(request.query_params, "limit", 1000, 10000)
        after = request.query_params.get("after")
        nodes = list(islice(files_below(archive, path, after=after), limit))
        results = [{"path": n.path, "size": n.size, "digest": n.md5} for n in nodes]
        if _flag(request, "urls"):
            self._add_locations(request, archive, results)
        next_url = None
        if len(results) == limit:
            query = request.query_params.copy()
            query["after"] = str(results[-1]["path"])
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
        return Response({"results": results, "next": next_url})

    @staticmethod
    def _add_locations(
        request: Request, archive: ZarrArchive, results: list[dict[str, Any]]
    ) -> None:
        """Each file's ``download_url`` and ``shard``, as its own entry has them; each object's
        URL signed once, all of them together."""
        if archive.as_of is not None:
            for result in results:
                result["download_url"] = version_read_url(request, archive, result["path"])
                result["shard"] = None
            return
        members = member_locations(archive, [r["path"] for r in results])
        keys = [
            members[r["path"]].key if r["path"] in members else archive.storage_prefix + r["path"]
            for r in results
        ]
        unique = list(dict.fromkeys(keys))
        urls = dict(zip(unique, download_urls(unique), strict=True))
        for result, key in zip(results, keys, strict=True):
            result["download_url"] = urls[key]
            result["shard"] = _shard(members.get(result["path"]))

    @extend_schema(request={"application/json": {"type": "array", "items": {"type": "object"}}})
    def delete(self, request: Request, zarr_id: str, path: str = "") -> Response:
        if path:
            raise ValidationFailed(
                f"DELETE takes the paths in the body, at /api/zarr/{zarr_id}/files/"
            )
        archive = archive_for_write(zarr_id, request.user)
        # Before the body is read: a stranger's body is never parsed.
        require_writer(request.user, archive.dandiset)
        files_delete(user=request.user, archive=archive, paths=parse_deleted_paths(request.data))
        return Response(status=status.HTTP_204_NO_CONTENT)
