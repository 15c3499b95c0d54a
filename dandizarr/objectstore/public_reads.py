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
from typing import Any

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
