import pytest
from rest_framework.test import APIClient


@pytest.mark.django_db
def test_info_advertises_batch_limit_and_expiry(settings) -> None:
    settings.DANDIZARR_BATCH_LIMIT = 123
    response = APIClient().get("/api/info/")
    assert response.status_code == 200
    assert response.json()["batch_limit"] == 123
    assert (
        response.json()["presigned_url_expiry_seconds"]
        == settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
    )


@pytest.mark.django_db
def test_openapi_schema_and_docs_are_served() -> None:
    client = APIClient()
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/zarr/{zarr_id}/upload/complete/" in schema.content
    assert client.get("/api/docs/").status_code == 200
