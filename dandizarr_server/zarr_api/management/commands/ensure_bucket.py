"""Create the S3 bucket the settings name, if missing, and let browsers read from it (CORS: GET
and HEAD from any origin, ranges and ETags exposed: the manifests' readers are browsers too), and
turn on object versioning (archive versions rely on it). Run once by docker-compose.yml before
the service starts; harmless to run again."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning

CORS = {
    "CORSRules": [
        {
            "AllowedMethods": ["GET", "HEAD"],
            "AllowedOrigins": ["*"],
            "AllowedHeaders": ["*"],
            "ExposeHeaders": ["ETag", "Content-Length", "Content-Range", "Accept-Ranges"],
            "MaxAgeSeconds": 86400,
        }
    ]
}


class Command(BaseCommand):
    help = "Create the S3 bucket (DANDIZARR_S3_BUCKET) if missing and set its CORS rules."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--wait", type=float, default=60, help="seconds to wait for S3 to answer"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = get_store()
        if not isinstance(store, S3ObjectStore):
            self.stdout.write("storage is local: no bucket to create")
            return
        client, bucket = store.client, settings.DANDIZARR_S3_BUCKET
        deadline = time.monotonic() + options["wait"]
        while True:
            try:
                client.head_bucket(Bucket=bucket)
                break
            except EndpointConnectionError as error:
                if time.monotonic() > deadline:
                    raise CommandError(f"S3 did not answer: {error}") from error
                time.sleep(0.5)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") not in {"404", "NoSuchBucket"}:
                    raise CommandError(f"bucket {bucket}: {error}") from error
                client.create_bucket(Bucket=bucket)
                self.stdout.write(f"created bucket {bucket}")
                break
        try:
            client.put_bucket_cors(Bucket=bucket, CORSConfiguration=CORS)  # type: ignore[arg-type]
        except ClientError as error:
            raise CommandError(f"bucket {bucket}: setting CORS failed: {error}") from error
        # Archive versions share objects with the draft: storage keeps what the draft replaces
        # (docs/versions.md). Publishing turns this on too; here it is on from the start.
        ensure_storage_versioning()
        self.stdout.write(f"bucket {bucket} ready (versioning enabled)")
