"""HTTP views: parse the request, call a service or selector, shape the answer. Nothing more."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpResponseRedirect, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr import __version__
from zarr_api import selectors, services, shards
from zarr_api.exceptions import NotFound, ValidationFailed
from zarr_api.models import Asset, Batch, Dandiset, Version, ZarrArchive
from zarr_api.paths import directory_problem
from zarr_api.serializers import (
    ArchiveCreateSerializer,
    ArchiveSerializer,
    AssetSerializer,
    DandisetCreateSerializer,
    DandisetSerializer,
    VersionSerializer,
)


class InfoView(APIView):
    """What a client needs to know before uploading."""

    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response(
            {
                "version": __version__,
                "batch_limit": settings.DANDIZARR_BATCH_LIMIT,
                "pack_member_limit": settings.DANDIZARR_PACK_MEMBER_LIMIT,
                "presigned_url_expiry_seconds": settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
                "storage": settings.DANDIZARR_STORAGE,
            }
        )


# --- Dandisets, versions, assets -----------------------------------------------------------


class DandisetListCreateView(generics.ListAPIView[Dandiset]):
    queryset = Dandiset.objects.prefetch_related("owners")
    serializer_class = DandisetSerializer

    @extend_schema(request=DandisetCreateSerializer, responses={201: DandisetSerializer})
    def post(self, request: Request) -> Response:
        data = DandisetCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dandiset = services.dandiset_create(user=request.user, name=data.validated_data["name"])
        return Response(DandisetSerializer(dandiset).data, status=status.HTTP_201_CREATED)


class DandisetDetailView(APIView):
    @extend_schema(responses=DandisetSerializer)
    def get(self, request: Request, identifier: str) -> Response:
        return Response(DandisetSerializer(selectors.dandiset_get(identifier)).data)


class VersionListView(generics.ListAPIView[Version]):
    serializer_class = VersionSerializer

    def get_queryset(self) -> QuerySet[Version]:
        dandiset = selectors.dandiset_get(self.kwargs["identifier"])
        return Version.objects.filter(dandiset=dandiset).select_related("dandiset")


def _version(identifier: str, version: str) -> Version:
    dandiset = selectors.dandiset_get(identifier)
    found = Version.objects.filter(dandiset=dandiset, version=version).first()
    if found is None:
        raise NotFound(f"dandiset {identifier} has no version {version!r}")
    return found


class AssetListCreateView(generics.ListAPIView[Asset]):
    serializer_class = AssetSerializer

    def get_queryset(self) -> QuerySet[Asset]:
        version = _version(self.kwargs["identifier"], self.kwargs["version"])
        return version.assets.select_related("zarr", "version")

    @extend_schema(request=AssetSerializer, responses={201: AssetSerializer})
    def post(self, request: Request, identifier: str, version: str) -> Response:
        if version != Version.DRAFT:
            raise ValidationFailed("assets are added to the draft version only")
        body = request.data if isinstance(request.data, dict) else {}
        if body.get("blob_id") is not None:
            raise ValidationFailed(
                "blob_id is not supported by this service: give zarr_id to add a zarr archive"
            )
        missing = [name for name in ("path", "zarr_id") if not body.get(name)]
        if missing:
            raise ValidationFailed(f"missing field(s): {', '.join(missing)}")
        asset = services.asset_create(
            user=request.user,
            dandiset=selectors.dandiset_get(identifier),
            path=body["path"],
            zarr_id=body["zarr_id"],
            metadata=body.get("metadata", {}),
        )
        return Response(AssetSerializer(asset).data, status=status.HTTP_201_CREATED)


class AssetDetailView(APIView):
    def _asset(self, identifier: str, version: str, asset_id: str) -> Asset:
        found = (
            _version(identifier, version)
            .assets.select_related("zarr", "version__dandiset")
            .filter(asset_id=asset_id)
            .first()
        )
        if found is None:
            raise NotFound(f"no asset {asset_id} in {identifier}/{version}")
        return found

    @extend_schema(responses=AssetSerializer)
    def get(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        return Response(AssetSerializer(self._asset(identifier, version, asset_id)).data)

    @extend_schema(request=AssetSerializer, responses=AssetSerializer)
    def put(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        asset = self._asset(identifier, version, asset_id)
        body = request.data if isinstance(request.data, dict) else {}
        asset = services.asset_update(
            user=request.user, asset=asset, path=body.get("path"), metadata=body.get("metadata")
        )
        return Response(AssetSerializer(asset).data)

    patch = put

    def delete(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        services.asset_delete(user=request.user, asset=self._asset(identifier, version, asset_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class PublishView(APIView):
    @extend_schema(request=None, responses={201: VersionSerializer})
    def post(self, request: Request, identifier: str) -> Response:
        version = services.version_publish(
            user=request.user, dandiset=selectors.dandiset_get(identifier)
        )
        return Response(VersionSerializer(version).data, status=status.HTTP_201_CREATED)


# --- Zarr archives ---------------------------------------------------------------------------


class ArchiveListCreateView(generics.ListAPIView[ZarrArchive]):
    serializer_class = ArchiveSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("dandiset", str, description="six-digit dandiset identifier"),
            OpenApiParameter("name", str),
        ]
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ZarrArchive]:
        queryset = selectors.archives_annotated()
        dandiset = self.request.query_params.get("dandiset")
        if dandiset:
            queryset = queryset.filter(dandiset_id=int(dandiset) if dandiset.isdigit() else -1)
        name = self.request.query_params.get("name")
        if name:
            queryset = queryset.filter(name=name)
        return queryset

    @extend_schema(request=ArchiveCreateSerializer, responses={201: ArchiveSerializer})
    def post(self, request: Request) -> Response:
        data = ArchiveCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        archive = services.archive_create(
            user=request.user,
            dandiset=selectors.dandiset_get(data.validated_data["dandiset"]),
            name=data.validated_data["name"],
            layout=data.validated_data.get("layout") or ZarrArchive.Layout.LOOSE,
        )
        return Response(
            ArchiveSerializer(_annotated_archive(str(archive.zarr_id))).data,
            status=status.HTTP_201_CREATED,
        )


def _annotated_archive(zarr_id: str) -> ZarrArchive:
    parsed = selectors.parse_zarr_id(zarr_id)
    archive = selectors.archives_annotated().filter(zarr_id=parsed).first() if parsed else None
    if archive is None:
        raise NotFound(f"no zarr archive with zarr_id {zarr_id!r}")
    return archive


class ArchiveDetailView(APIView):
    @extend_schema(responses=ArchiveSerializer)
    def get(self, request: Request, zarr_id: str) -> Response:
        return Response(ArchiveSerializer(_annotated_archive(zarr_id)).data)


class UploadView(APIView):
    @extend_schema(responses={204: None, 404: None})
    def get(self, request: Request, zarr_id: str) -> Response:
        archive = selectors.archive_get(zarr_id)
        if archive.batches.filter(state=Batch.State.OPEN).exists():
            return Response(status=status.HTTP_204_NO_CONTENT)
        raise NotFound(f"zarr archive {zarr_id} has no upload batch in progress")

    @extend_schema(
        request={"application/json": {"type": "array", "items": {"type": "object"}}},
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def post(self, request: Request, zarr_id: str) -> Response:
        archive = selectors.archive_get(zarr_id)
        if isinstance(request.data, dict):  # a pack batch (docs/sharded.md)
            pack = services.pack_batch_start(user=request.user, archive=archive, body=request.data)
            return Response(
                {
                    "batch": pack.batch.pk,
                    "shards": [{"name": t.path, "upload_url": t.upload_url} for t in pack.shards],
                }
            )
        targets = services.batch_start(user=request.user, archive=archive, files=request.data)
        return Response([{"path": t.path, "upload_url": t.upload_url} for t in targets])

    def delete(self, request: Request, zarr_id: str) -> Response:
        services.batch_cancel(user=request.user, archive=selectors.archive_get(zarr_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class UploadCompleteView(APIView):
    @extend_schema(request=None)
    def post(self, request: Request, zarr_id: str) -> Response:
        batch = services.batch_complete(user=request.user, archive=selectors.archive_get(zarr_id))
        archive = _annotated_archive(zarr_id)
        return Response(
            {
                "verified": True,
                "batch": batch.pk,
                "files": batch.files.count(),
                **ArchiveSerializer(archive).data,
            }
        )


class BatchDetailView(APIView):
    """One batch of an archive: how a client learns that a pack batch was applied or failed."""

    def get(self, request: Request, zarr_id: str, batch_id: str) -> Response:
        archive = selectors.archive_get(zarr_id)
        batch = (
            Batch.objects.filter(archive=archive, pk=int(batch_id)).first()
            if batch_id.isdigit()
            else None
        )
        if batch is None:
            raise NotFound(f"zarr archive {zarr_id} has no batch {batch_id!r}")
        return Response(
            {
                "id": batch.pk,
                "kind": batch.kind,
                "state": batch.state,
                "error": batch.error,
                "note": batch.note,
                "files": batch.files.count(),
                "shards": batch.shards.count(),
                "created": batch.created,
                "completed": batch.completed,
                "applied": batch.applied,
            }
        )


class PackView(APIView):
    """Convert the archive's chunk files into shards, in the background."""

    @extend_schema(request=None, responses={202: ArchiveSerializer})
    def post(self, request: Request, zarr_id: str) -> Response:
        services.archive_pack(user=request.user, archive=selectors.archive_get(zarr_id))
        return Response(
            ArchiveSerializer(_annotated_archive(zarr_id)).data, status=status.HTTP_202_ACCEPTED
        )


def _page_number(request: Request, name: str, default: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValidationFailed(f"{name} must be a positive integer, got {raw!r}")
    return min(int(raw), maximum)


class FilesView(APIView):
    """Browse an archive (GET, from the .checksum tree) and delete files (DELETE)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("page", int),
            OpenApiParameter("page_size", int),
            OpenApiParameter("recursive", bool, description="every file below, in path order"),
            OpenApiParameter("after", str, description="cursor for recursive listings"),
            OpenApiParameter("limit", int),
            OpenApiParameter("download", bool, description="redirect to the file's bytes"),
        ]
    )
    def get(
        self, request: Request, zarr_id: str, path: str = ""
    ) -> Response | HttpResponseRedirect | StreamingHttpResponse:
        archive = selectors.archive_get(zarr_id)
        problem = directory_problem(path)
        if problem:
            raise ValidationFailed(f"path {path!r} {problem}")
        if request.query_params.get("recursive") in {"1", "true", "yes"}:
            return self._recursive(request, archive, path)
        node = selectors.node_get(archive, path)
        if isinstance(node, selectors.FileNode):
            download = request.query_params.get("download") in {"1", "true", "yes"}
            location = shards.member_location(archive, node.path)
            if location is not None:
                if download:
                    response = StreamingHttpResponse(
                        shards.iter_member_bytes(location),
                        content_type="application/octet-stream",
                    )
                    response["Content-Length"] = str(location.length)
                    return response
                return Response(
                    {
                        **self._file(node, location.key),
                        "shard": {
                            "key": location.key,
                            "offset": location.offset,
                            "length": location.length,
                        },
                    }
                )
            key = archive.storage_prefix + node.path
            if download:
                return HttpResponseRedirect(selectors.download_url(key))
            return Response({**self._file(node, key), "shard": None})
        return Response(self._directory(request, node))

    @staticmethod
    def _file(node: selectors.FileNode, key: str) -> dict[str, Any]:
        """A file's entry; ``key`` is its object (a packed file's: its shard's)."""
        return {
            "type": "file",
            "path": node.path,
            "name": node.path.rsplit("/", 1)[-1],
            "size": node.size,
            "digest": node.md5,
            "s3_key": key,
            "download_url": selectors.download_url(key),
        }

    def _directory(self, request: Request, node: selectors.DirectoryNode) -> dict[str, Any]:
        listing = node.listing
        prefix = f"{node.path}/" if node.path else ""
        entries = [
            {"type": "directory", "name": n, "path": prefix + n, "digest": d.digest, "size": d.size}
            for n, d in sorted(listing.directories.items())
        ] + [
            {"type": "file", "name": n, "path": prefix + n, "digest": f.digest, "size": f.size}
            for n, f in sorted(listing.files.items())
        ]
        page = _page_number(request, "page", 1, 10**9)
        page_size = _page_number(request, "page_size", 100, 1000)
        start = (page - 1) * page_size
        if start and start >= len(entries):
            raise NotFound(f"page {page} is past the end of the listing")

        def link(number: int) -> str:
            query = request.query_params.copy()
            query["page"] = str(number)
            return request.build_absolute_uri(f"{request.path}?{urlencode(query)}")

        return {
            "type": "directory",
            "path": node.path,
            "name": node.path.rsplit("/", 1)[-1],
            "digest": listing.digest(),
            "size": listing.size,
            "file_count": listing.count,
            "count": len(entries),
            "next": link(page + 1) if start + page_size < len(entries) else None,
            "previous": link(page - 1) if page > 1 else None,
            "results": entries[start : start + page_size],
        }

    def _recursive(self, request: Request, archive: ZarrArchive, path: str) -> Response:
        limit = _page_number(request, "limit", 1000, 10000)
        after = request.query_params.get("after")
        results: list[dict[str, Any]] = []
        for node in selectors.files_below(archive, path, after=after):
            if len(results) == limit:
                break
            results.append({"path": node.path, "size": node.size, "digest": node.md5})
        next_url = None
        if len(results) == limit:
            query = request.query_params.copy()
            query["after"] = str(results[-1]["path"])
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
        return Response({"results": results, "next": next_url})

    @extend_schema(request={"application/json": {"type": "array", "items": {"type": "object"}}})
    def delete(self, request: Request, zarr_id: str, path: str = "") -> Response:
        if path:
            raise ValidationFailed(
                f"DELETE takes the paths in the body, at /api/zarr/{zarr_id}/files/"
            )
        services.files_delete(
            user=request.user, archive=selectors.archive_get(zarr_id), entries=request.data
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
