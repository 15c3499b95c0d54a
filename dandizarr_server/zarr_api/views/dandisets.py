"""Views of the service's info, dandisets, their versions and draft assets, and publishing."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr_server.zarr_api.domain.permissions import require_writer
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.edge.throttles import PUBLISH_THROTTLES
from dandizarr_server.zarr_api.models import Asset, Dandiset, Version
from dandizarr_server.zarr_api.parsers.assets import (
    parse_asset_changes,
    parse_asset_filters,
    parse_new_asset,
)
from dandizarr_server.zarr_api.parsers.flags import parse_flag
from dandizarr_server.zarr_api.selectors.dandi import server_info
from dandizarr_server.zarr_api.selectors.listings import dandiset_versions, version_assets
from dandizarr_server.zarr_api.selectors.lookups import (
    asset_get,
    dandiset_get,
    readable_dandisets_list,
    version_get,
)
from dandizarr_server.zarr_api.services.assets import asset_create, asset_delete, asset_update
from dandizarr_server.zarr_api.services.dandisets import dandiset_create
from dandizarr_server.zarr_api.services.embargo import embargo_release
from dandizarr_server.zarr_api.services.multipart_uploads import multipart_threshold
from dandizarr_server.zarr_api.services.publishing import version_publish
from dandizarr_server.zarr_api.views.serializers import (
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
                **server_info(),
                "version": settings.DANDIZARR_VERSION,
                "batch_limit": settings.DANDIZARR_BATCH_LIMIT,
                "open_batch_file_limit": settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT,
                "pack_member_limit": settings.DANDIZARR_PACK_MEMBER_LIMIT,
                "presigned_url_expiry_seconds": settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
                "storage": settings.DANDIZARR_STORAGE,
                # Files over this are declared with their size and parts (null: never).
                "multipart_threshold_bytes": multipart_threshold(),
                "multipart_part_bytes": settings.DANDIZARR_MULTIPART_PART_BYTES,
                # What files sent in parts may declare: one batch, one account's open ones.
                "batch_declared_bytes_limit": settings.DANDIZARR_BATCH_DECLARED_BYTES_LIMIT,
                "batch_declared_parts_limit": settings.DANDIZARR_BATCH_DECLARED_PARTS_LIMIT,
                "account_declared_bytes_limit": settings.DANDIZARR_ACCOUNT_DECLARED_BYTES_LIMIT,
            }
        )


class DandisetListCreateView(generics.ListAPIView[Dandiset]):
    serializer_class = DandisetSerializer

    def get_queryset(self) -> QuerySet[Dandiset]:
        return readable_dandisets_list(self.request.user).prefetch_related("owners")

    @extend_schema(
        request=DandisetCreateSerializer,
        responses={201: DandisetSerializer},
        parameters=[OpenApiParameter("embargo", bool, description="create it private")],
    )
    def post(self, request: Request) -> Response:
        data = DandisetCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        embargoed = data.validated_data["embargo"] or parse_flag(request, "embargo")
        dandiset = dandiset_create(
            user=request.user, name=data.validated_data["name"], embargoed=embargoed
        )
        return Response(DandisetSerializer(dandiset).data, status=status.HTTP_201_CREATED)


class DandisetDetailView(APIView):
    @extend_schema(responses=DandisetSerializer)
    def get(self, request: Request, identifier: str) -> Response:
        return Response(DandisetSerializer(dandiset_get(identifier, request.user)).data)


class VersionListView(generics.ListAPIView[Version]):
    serializer_class = VersionSerializer

    def get_queryset(self) -> QuerySet[Version]:
        dandiset = dandiset_get(self.kwargs["identifier"], self.request.user)
        return dandiset_versions(dandiset)


class AssetListCreateView(generics.ListAPIView[Asset]):
    serializer_class = AssetSerializer

    def get_queryset(self) -> QuerySet[Asset]:
        version = version_get(self.kwargs["identifier"], self.kwargs["version"], self.request.user)
        return version_assets(version, parse_asset_filters(self.request.query_params))

    @extend_schema(request=AssetSerializer, responses={201: AssetSerializer})
    def post(self, request: Request, identifier: str, version: str) -> Response:
        if version != Version.DRAFT:
            raise ValidationFailed("assets are added to the draft version only")
        dandiset = dandiset_get(identifier, request.user)
        require_writer(request.user, dandiset)
        new = parse_new_asset(request.data)
        asset = asset_create(
            user=request.user,
            dandiset=dandiset,
            path=new.path,
            zarr_id=new.zarr_id,
            metadata=new.metadata,
        )
        return Response(AssetSerializer(asset).data, status=status.HTTP_201_CREATED)


class AssetDetailView(APIView):
    @extend_schema(responses=AssetSerializer)
    def get(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        data = AssetSerializer(asset_get(identifier, version, asset_id, request.user)).data
        # The DANDI API answers with the metadata itself: both shapes in one.
        return Response({**data["metadata"], **data})

    @extend_schema(request=AssetSerializer, responses=AssetSerializer)
    def put(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        asset = asset_get(identifier, version, asset_id, request.user)
        require_writer(request.user, asset.version.dandiset)
        changes = parse_asset_changes(request.data)
        if changes.zarr_id is not None and changes.zarr_id != str(asset.zarr.zarr_id):
            raise ValidationFailed("an asset's zarr_id cannot change: add a new asset instead")
        asset = asset_update(
            user=request.user, asset=asset, path=changes.path, metadata=changes.metadata
        )
        return Response(AssetSerializer(asset).data)

    patch = put

    def delete(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        asset_delete(
            user=request.user, asset=asset_get(identifier, version, asset_id, request.user)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class UnembargoView(APIView):
    """Release a private dandiset (owners, staff): 202 while its release finishes."""

    @extend_schema(request=None, responses={202: DandisetSerializer})
    def post(self, request: Request, identifier: str) -> Response:
        dandiset = embargo_release(
            user=request.user, dandiset=dandiset_get(identifier, request.user)
        )
        return Response(DandisetSerializer(dandiset).data, status=status.HTTP_202_ACCEPTED)


class PublishView(APIView):
    throttle_classes = PUBLISH_THROTTLES

    @extend_schema(request=None, responses={201: VersionSerializer})
    def post(self, request: Request, identifier: str) -> Response:
        version = version_publish(
            user=request.user, dandiset=dandiset_get(identifier, request.user)
        )
        return Response(VersionSerializer(version).data, status=status.HTTP_201_CREATED)
