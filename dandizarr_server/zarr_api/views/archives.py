"""Views of zarr archives: create and show them, upload batches (loose and pack), batches,
and conversion into shards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.parsers.archive_filters import parse_archive_filters
from dandizarr_server.zarr_api.parsers.dandi import required_acl
from dandizarr_server.zarr_api.parsers.pack_batch import PackBatchBody, pack_batch_shards
from dandizarr_server.zarr_api.parsers.upload_batch import (
    parse_part_page_request,
    parse_upload_files,
)
from dandizarr_server.zarr_api.parsers.upload_body import UploadBodyParser
from dandizarr_server.zarr_api.selectors.batch_states import has_open_batch
from dandizarr_server.zarr_api.selectors.listings import archives_listed
from dandizarr_server.zarr_api.selectors.lookups import (
    annotated_archive_get,
    archive_for_write,
    archive_get,
    batch_get,
    dandiset_get,
)
from dandizarr_server.zarr_api.services.batch_rules import UploadTarget
from dandizarr_server.zarr_api.services.conversion import archive_conversion_start
from dandizarr_server.zarr_api.services.dandisets import archive_create
from dandizarr_server.zarr_api.services.pack_batches import pack_batch_start
from dandizarr_server.zarr_api.services.part_pages import part_urls_next
from dandizarr_server.zarr_api.services.upload_batches import (
    batch_cancel,
    batch_complete,
    batch_files_add,
    batch_start,
)
from dandizarr_server.zarr_api.views.serializers import (
    ArchiveCreateSerializer,
    ArchiveSerializer,
    BatchSerializer,
    part_page_data,
    upload_target_data,
)


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
        return archives_listed(self.request.user, parse_archive_filters(self.request.query_params))

    @extend_schema(request=ArchiveCreateSerializer, responses={201: ArchiveSerializer})
    def post(self, request: Request) -> Response:
        data = ArchiveCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        archive = archive_create(
            user=request.user,
            dandiset=dandiset_get(data.validated_data["dandiset"], request.user),
            name=data.validated_data["name"],
            layout=data.validated_data.get("layout") or ZarrArchive.Layout.LOOSE,
        )
        return Response(
            ArchiveSerializer(annotated_archive_get(str(archive.zarr_id), request.user)).data,
            status=status.HTTP_201_CREATED,
        )


class ArchiveDetailView(APIView):
    @extend_schema(responses=ArchiveSerializer)
    def get(self, request: Request, zarr_id: str) -> Response:
        return Response(ArchiveSerializer(annotated_archive_get(zarr_id, request.user)).data)


class UploadView(APIView):
    # A pack batch's body is read as a stream (parse_pack_batch), not json.loads'd whole.
    parser_classes = [UploadBodyParser, FormParser, MultiPartParser]

    @extend_schema(responses={204: None, 404: None})
    def get(self, request: Request, zarr_id: str) -> Response:
        archive = archive_get(zarr_id, request.user)
        if has_open_batch(archive):
            return Response(status=status.HTTP_204_NO_CONTENT)
        raise NotFound(
            f"zarr archive {zarr_id} has no upload batch in progress", code="no_open_batch"
        )

    @extend_schema(
        request={"application/json": {"type": "array", "items": {"type": "object"}}},
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def post(self, request: Request, zarr_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        # Before the body is read: a stranger's 100,000-member body is never parsed.
        require_writer(request.user, archive.dandiset)
        if isinstance(request.data, PackBatchBody | dict):  # a pack batch (docs/sharded.md)
            shards = pack_batch_shards(request.data)
            pack = pack_batch_start(user=request.user, archive=archive, shards=shards)
            return Response(
                {
                    "batch": pack.batch.pk,
                    "shards": [{"name": t.path, "upload_url": t.upload_url} for t in pack.shards],
                }
            )
        return _loose_files_request(batch_start, request, archive)

    def delete(self, request: Request, zarr_id: str) -> Response:
        batch_cancel(user=request.user, archive=archive_for_write(zarr_id, request.user))
        return Response(status=status.HTTP_204_NO_CONTENT)


class LooseFilesService(Protocol):
    def __call__(
        self,
        *,
        user: Requester,
        archive: ZarrArchive,
        files: Sequence[FileDeclaration],
        acl: str = "",
    ) -> list[UploadTarget]: ...


def _loose_files_request(
    service: LooseFilesService, request: Request, archive: ZarrArchive
) -> Response:
    """``upload/`` and ``upload/add/`` with a list of files: the files and the ACL their URLs
    require parsed, ``service`` called, and each file's URL returned."""
    targets = service(
        user=request.user,
        archive=archive,
        files=parse_upload_files(request.data),
        acl=required_acl(request.headers),
    )
    return Response([upload_target_data(t) for t in targets])


class UploadAddView(APIView):
    """More files for the open batch (its uploader's): their URLs, while earlier PUTs run."""

    @extend_schema(
        request={"application/json": {"type": "array", "items": {"type": "object"}}},
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def post(self, request: Request, zarr_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        require_writer(request.user, archive.dandiset)  # before the body is read
        return _loose_files_request(batch_files_add, request, archive)


class UploadCompleteView(APIView):
    @extend_schema(request=None)
    def post(self, request: Request, zarr_id: str) -> Response:
        batch = batch_complete(user=request.user, archive=archive_for_write(zarr_id, request.user))
        archive = annotated_archive_get(zarr_id, request.user)
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

    @extend_schema(responses=BatchSerializer)
    def get(self, request: Request, zarr_id: str, batch_id: str) -> Response:
        return Response(
            BatchSerializer(batch_get(archive_get(zarr_id, request.user), batch_id)).data
        )


class BatchPartsView(APIView):
    """The next part URLs of a file sent in parts, for its batch's uploader while the batch
    is open (docs/api.md, "Big files")."""

    @extend_schema(
        request={
            "application/json": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "first_part": {"type": "integer"}},
                "required": ["path"],
            }
        },
        responses={200: {"type": "object"}},
    )
    def post(self, request: Request, zarr_id: str, batch_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        require_writer(request.user, archive.dandiset)  # before the body is read
        path, first_part = parse_part_page_request(request.data)
        page = part_urls_next(
            user=request.user,
            archive=archive,
            batch_id=batch_id,
            path=path,
            first_part=first_part,
        )
        return Response({"path": path, **part_page_data(page)})


class PackView(APIView):
    """Convert the archive's chunk files into shards, in the background."""

    @extend_schema(request=None, responses={202: ArchiveSerializer})
    def post(self, request: Request, zarr_id: str) -> Response:
        archive_conversion_start(
            user=request.user, archive=archive_for_write(zarr_id, request.user)
        )
        return Response(
            ArchiveSerializer(annotated_archive_get(zarr_id, request.user)).data,
            status=status.HTTP_202_ACCEPTED,
        )
