"""The part of a bucket anyone may read: one statement of the bucket policy, by key prefix.

A deployment whose bucket serves public data without signatures (DANDI's does) must keep the
objects of private archives out of that part. S3 grants anonymous reads by bucket policy; the
statement kept here (``Sid`` ``PUBLIC_STATEMENT``) allows ``s3:GetObject`` on exactly the key
prefixes given, and every other statement of the policy is left as the operator wrote it. A key
under no listed prefix is read with a signature only. SeaweedFS evaluates such prefix grants
(and not object-tag conditions, which AWS also offers: docs/embargo.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from dandizarr.objectstore.s3 import S3ObjectStore

PUBLIC_STATEMENT = "dandizarr-public-archives"


def policy_with_public_prefixes(
    current: str | None, bucket: str, prefixes: Sequence[str]
) -> dict[str, Any] | None:
    """``current`` (a policy document, or None) with its public statement made to grant
    ``prefixes``; None when nothing is left (the policy is then deleted)."""
    document: dict[str, Any] = json.loads(current) if current else {"Version": "2012-10-17"}
    kept = [s for s in document.get("Statement", []) if s.get("Sid") != PUBLIC_STATEMENT]
    if prefixes:
        kept.append(
            {
                "Sid": PUBLIC_STATEMENT,
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*" for prefix in sorted(prefixes)],
            }
        )
    if not kept:
        return None
    document["Statement"] = kept
    return document


def public_read_prefixes_set(store: S3ObjectStore, prefixes: Sequence[str]) -> None:
    """Let anyone GET the keys of ``store``'s bucket under ``prefixes`` and no others; the
    bucket policy's other statements are kept."""
    client, bucket = store.client, store.bucket
    try:
        current: str | None = client.get_bucket_policy(Bucket=bucket)["Policy"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in {
            "NoSuchBucketPolicy",
            "NoSuchPolicy",
        }:
            raise
        current = None
    document = policy_with_public_prefixes(current, bucket, prefixes)
    if document is None:
        if current is not None:
            client.delete_bucket_policy(Bucket=bucket)
    else:
        client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(document))
