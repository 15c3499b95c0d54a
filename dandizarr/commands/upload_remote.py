"""``dandizarr upload URL``: a remote Zarr streamed into a write session of the archive
(``DandizarrClient.upload_remote``; docs/writing.md, "Uploading from a remote store")."""

from __future__ import annotations

import argparse

from dandizarr.commands.connection import client_errors, json_errors, make_client, make_progress
from dandizarr.commands.errors import CommandError
from dandizarr.commands.upload_report import report

# Options of a local upload that mean nothing for a URL (the flag, and why).
_LOCAL_ONLY = {
    "pack": "--pack (an upload from a URL sends its files loose)",
    "shard_size": "--shard-size",
    "hash_jobs": "--hash-jobs (files are hashed as they stream: --jobs)",
    "batch_files": "--batch-files (a URL goes into one write session)",
    "strict": "--strict (a remote OME-Zarr is not validated)",
    "cancel_open_batch": "--cancel-open-batch (a write session takes no batch slot)",
}


def run_remote(args: argparse.Namespace) -> int:
    given = [flag for name, flag in _LOCAL_ONLY.items() if getattr(args, name, None)]
    if given:
        raise CommandError(f"{given[0]} is for local directories, not for a URL")
    if not args.zarr_id and not args.dandiset:
        raise CommandError("give --dandiset (and optionally --name), or --zarr-id")
    progress = make_progress(args, "upload")
    with json_errors(args), client_errors(), make_client(args) as client:
        from dandizarr.client.remote_source import parse_storage_options

        result = client.upload_remote(
            args.path,
            storage_options=parse_storage_options(args.storage_option),
            piece_bytes=args.piece_size,
            dandiset=args.dandiset,
            name=args.name,
            zarr_id=args.zarr_id,
            sync=args.sync,
            checksum_timeout=args.checksum_timeout,
            progress=progress,
        )
    return report(args, result)
