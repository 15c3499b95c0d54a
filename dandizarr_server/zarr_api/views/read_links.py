"""``/api/zarr/{zarr_id}/read-links/``: private read links, made and revoked by the archive's
owners (and staff); to anyone else the routes answer as for a missing archive
(docs/embargo.md)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr_server.zarr_api.domain.permissions import user_can_write
from dandizarr_server.zarr_api.domain.read_links import PREFIX
from dandizarr_server.zarr_api.edge.exceptions import NotFound, ValidationFailed
from dandizarr_server.zarr_api.models import ReadLink, ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_versions import archive_version_find
from dandizarr_server.zarr_api.selectors.lookups import archive_get
from dandizarr_server.zarr_api.selectors.read_links import read_links
from dandizarr_server.zarr_api.services.read_links import read_link_create, read_link_revoke


def _owned(zarr_id: str, request: Request) -> ZarrArchive:
    archive = archive_get(zarr_id, request.user)
    if not user_can_write(request.user, archive.dandiset):
        raise NotFound(f"no zarr archive with zarr_id {zarr_id}")
    return archive


def _shown(link: ReadLink) -> dict[str, object]:
    return {
        "id": link.pk,
        "version": link.version.number if link.version is not None else None,
        "expires": link.expires.isoformat(),
    }


class ReadLinksView(APIView):
    """``GET`` the live links (never their secrets); ``POST {"expires_in", "version"?}`` makes
    one: 201 ``{"id", "url", "expires", "version"}``, the only time its secret is told."""

    def get(self, request: Request, zarr_id: str) -> Response:
        archive = _owned(zarr_id, request)
        return Response({"results": [_shown(link) for link in read_links(archive)]})

    def post(self, request: Request, zarr_id: str) -> Response:
        archive = _owned(zarr_id, request)
        data = request.data if isinstance(request.data, dict) else {}
        expires_in = data.get("expires_in")
        longest = settings.DANDIZARR_READ_LINK_MAX_SECONDS
        if type(expires_in) is not int or not 0 < expires_in <= longest:
            raise ValidationFailed(f"expires_in must be a whole number of seconds, 1 to {longest}")
        version = None
        number = data.get("version")
        if number is not None:
            found = archive_version_find(archive, str(number)[:20])
            if found is None:
                raise NotFound(
                    f"zarr archive {archive.zarr_id} has no version {str(number)[:20]!r}"
                )
            version = found
        elif archive.as_of is not None:
            version = archive.as_of  # asked for through a version's id
        made = read_link_create(archive, request.user, expires_in, version)
        url = request.build_absolute_uri(f"/{PREFIX}{made.secret}/")
        return Response({**_shown(made.link), "url": url}, status=status.HTTP_201_CREATED)


class ReadLinkView(APIView):
    """``DELETE``: revoke the link, at once, in every process (204)."""

    def delete(self, request: Request, zarr_id: str, link_id: str) -> Response:
        archive = _owned(zarr_id, request)
        read_link_revoke(archive, link_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
