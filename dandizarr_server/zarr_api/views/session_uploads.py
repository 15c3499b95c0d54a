"""Big files of write sessions (docs/writing.md, "Big files"): begin one, its part URLs, its
finish. Thin: parsers at the edge, ``services.session_big_files`` for the writes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr_server.zarr_api.models import MultipartUpload
from dandizarr_server.zarr_api.parsers.session_uploads import (
    parse_parts_declared,
    parse_upload_begin,
    parse_upload_finish,
)
from dandizarr_server.zarr_api.services.session_big_files import (
    session_parts_sign,
    session_upload_begin,
    session_upload_finish,
)
from dandizarr_server.zarr_api.views.sessions import writer_session

_OBJECT = {"application/json": {"type": "object"}}


def _upload_json(upload: MultipartUpload) -> dict[str, object]:
    return {
        "upload": upload.pk,
        "path": upload.path,
        "size": upload.size,
        "part_size": upload.part_size,
        "part_count": len(upload.part_md5s),
        "state": upload.state,
    }


class SessionUploadsView(APIView):
    @extend_schema(request=_OBJECT, responses={201: _OBJECT})
    def post(self, request: Request, zarr_id: str, session_id: str) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        path, size = parse_upload_begin(request.data)
        upload = session_upload_begin(
            user=request.user, archive=archive, session=session, path=path, size=size
        )
        return Response(_upload_json(upload), status=status.HTTP_201_CREATED)


class SessionUploadPartsView(APIView):
    @extend_schema(request=_OBJECT, responses={200: _OBJECT})
    def post(self, request: Request, zarr_id: str, session_id: str, upload: int) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        parts = parse_parts_declared(request.data)
        urls = session_parts_sign(
            user=request.user, archive=archive, session=session, upload_id=upload, parts=parts
        )
        return Response({"first_part": parts.first_part, "part_urls": urls})


class SessionUploadFinishView(APIView):
    @extend_schema(request=_OBJECT, responses={200: _OBJECT})
    def post(self, request: Request, zarr_id: str, session_id: str, upload: int) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        md5 = parse_upload_finish(request.data)
        finished = session_upload_finish(
            user=request.user, archive=archive, session=session, upload_id=upload, md5=md5
        )
        return Response(_upload_json(finished) | {"md5": finished.md5})
