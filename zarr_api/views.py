from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr import __version__


class InfoView(APIView):
    """What a client needs to know before uploading."""

    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response(
            {
                "version": __version__,
                "batch_limit": settings.DANDIZARR_BATCH_LIMIT,
                "presigned_url_expiry_seconds": settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
                "storage": settings.DANDIZARR_STORAGE,
            }
        )
