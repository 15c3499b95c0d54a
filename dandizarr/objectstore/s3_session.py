"""The boto3 session an S3ObjectStore makes its clients from."""

from __future__ import annotations

import functools

import boto3
from botocore.loaders import Loader

from dandizarr.objectstore.s3_listing import use_fast_listing


def new_session(access_key_id: str | None, secret_access_key: str | None) -> boto3.session.Session:
    """A private session: boto3's default session is not thread-safe to create clients from.
    Keys given here are the session's, so its credentials are what its clients sign with. Its
    clients parse listings here (``use_fast_listing``) and load botocore's data through the
    loader every store's session shares."""
    session = boto3.session.Session(
        aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key
    )
    # Before the session loads anything: its own loader is only made, not used, by now.
    session._session.register_component("data_loader", _shared_loader())
    use_fast_listing(session._session)
    return session


@functools.cache
def _shared_loader() -> Loader:
    """botocore's loader of the JSON an S3 client is built from (the service model, the
    endpoints, the endpoint rule set). It caches what it parsed, but each session makes a loader
    of its own: every store paid the parsing again, most of the CPU of making one (a store is
    made per process in production, per settings change in the tests). botocore and boto3 read
    what it loads and never change it. Its search paths are a new session's (``AWS_DATA_PATH``
    as it is on first use, boto3's own data directory)."""
    loader: Loader = boto3.session.Session()._session.get_component("data_loader")
    return loader
