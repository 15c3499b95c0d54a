"""``dandizarr upload``: upload a directory into a zarr archive and verify its checksum.

The work is ``DandizarrClient.upload``; this module parses arguments, shows progress and
prints the summary.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dandizarr.client.upload_types import DEFAULT_CHECKSUM_TIMEOUT
from dandizarr.commands import Subparsers
from dandizarr.commands.connection import (
    add_connection_arguments,
    client_errors,
    json_errors,
    make_client,
    make_progress,
    positive_int,
)
from dandizarr.commands.errors import CommandError
from dandizarr.commands.upload_report import report

_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def byte_size(text: str) -> int:
    """``65536``, ``64K``, ``64MiB``, ``1G``: a positive number of bytes (binary units)."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = value[-1:] if value[-1:] in ("k", "m", "g") else ""
    number = value[: len(value) - len(unit)]
    try:
        size = int(number) * _SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r}") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return size


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "upload",
        help="upload a directory (or a remote Zarr's URL) into a zarr archive and verify its "
        "checksum",
        description="Upload the directory PATH into a zarr archive: files the server already "
        "holds with the same md5 are skipped, the rest go in batches of parallel PUTs, and the "
        "server's checksum is compared with the local one at the end (exit status 0 only when "
        "they are equal). An interrupted upload resumes when run again. PATH may be a URL "
        "(s3://, gs://, https://, any fsspec protocol; needs the `remote` extra): the remote "
        "Zarr is streamed, a piece at a time, into one write session of the archive, with no "
        "local copy, and committed at once (a killed run leaves the archive as it was and "
        "resumes when run again). S3 credentials come from the environment as for the AWS "
        "CLI, or from --storage-option; https:// is read anonymously.",
    )
    parser.add_argument(
        "path", metavar="PATH", help="the local zarr directory, or a URL (s3://bucket/x.zarr)"
    )
    parser.add_argument(
        "--dandiset", metavar="ID", help="the dandiset (needed unless --zarr-id is given)"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--name", help="the archive's name in the dandiset (default: PATH's directory name)"
    )
    target.add_argument("--zarr-id", metavar="UUID", help="an existing archive")
    parser.add_argument(
        "--sync", action="store_true", help="also delete remote files that are absent locally"
    )
    parser.add_argument(
        "--cancel-open-batch",
        action="store_true",
        help="cancel a batch another client left open on the archive (deletes its uploads)",
    )
    parser.add_argument(
        "--hash-jobs", type=positive_int, help="parallel md5 computations (default: CPUs, <= 8)"
    )
    parser.add_argument(
        "--batch-files",
        type=positive_int,
        metavar="N",
        help="files a batch gathers (its URLs asked for while earlier files are sent) before "
        "it is verified and completed (default: 10,000; the server may allow fewer)",
    )
    parser.add_argument(
        "--checksum-timeout",
        type=float,
        default=DEFAULT_CHECKSUM_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the server's checksum (default: {DEFAULT_CHECKSUM_TIMEOUT:g})",
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="store the arrays' chunk files in shard objects (a new archive is created "
        "sharded): far fewer storage objects and requests for many small chunks",
    )
    parser.add_argument(
        "--shard-size",
        type=byte_size,
        metavar="BYTES",
        help="with --pack, uncompressed chunk bytes per shard, e.g. 64M (default: 64 MiB)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse to upload an OME-Zarr that is not valid OME-NGFF (without it: a warning)",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="for a URL: an fsspec option of its filesystem, repeatable; a JSON value is "
        "decoded (e.g. endpoint_url=http://localhost:9000, anon=true, "
        'client_kwargs=\'{"region_name": "us-west-2"}\')',
    )
    parser.add_argument(
        "--piece-size",
        type=byte_size,
        metavar="BYTES",
        help="for a URL: the most read from the source at a time, and the biggest file sent "
        "from memory (default: 8M); memory holds about two pieces per job",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="send nothing: print what the upload would add and modify (and with --sync "
        "delete), from the local tree's checksums and the archive's",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def ome_problems(path: str) -> list[str]:
    """What the OME-NGFF spec says is wrong with the OME-Zarr images and groups under
    ``path``, one line each (none for valid ones and for plain Zarr)."""
    from dandizarr.ome import describe  # loaded when the command runs
    from dandizarr.ome.local import local_documents

    documents = local_documents(path)
    summary = describe(documents)
    if not summary.is_ome:
        return []
    try:
        # ome-zarr-models and zarr-python: the `ome` extra, loaded only for an OME-Zarr.
        from dandizarr.ome.validation import validate
    except ImportError:
        return [
            "this is an OME-Zarr, and validating it needs ome-zarr-models: "
            "pip install 'dandizarr[ome]'"
        ]
    lines = []
    for verdict in validate(documents, summary).validations:
        for error in verdict.errors:
            lines.append(f"{error.path}: {error.message}")
    return lines


def check_ome(path: str, *, strict: bool) -> None:
    """Warn about an invalid OME-Zarr; with ``strict``, refuse it."""
    problems = ome_problems(path)
    if not problems:
        return
    shown = "\n  ".join(problems[:20])
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    message = f"{path} is not valid OME-NGFF:\n  {shown}{more}"
    if strict:
        raise CommandError(message + "\n(refused: --strict)")
    print(f"dandizarr: warning: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from dandizarr.client.remote_source import is_remote_url

    if is_remote_url(args.path):
        if args.dry_run:
            # Never an upload when asked for none: a URL's tree is not hashed here.
            raise CommandError("--dry-run is for a local directory, not a URL")
        from dandizarr.commands.upload_remote import run_remote

        return run_remote(args)
    if args.storage_option or args.piece_size:
        raise CommandError("--storage-option and --piece-size are for an upload from a URL")
    if not os.path.isdir(args.path):
        raise CommandError(f"{args.path} is not a directory")
    if not args.zarr_id and not args.dandiset:
        raise CommandError("give --dandiset (and optionally --name), or --zarr-id")
    if args.shard_size and not args.pack:
        raise CommandError("--shard-size needs --pack")
    check_ome(args.path, strict=args.strict)
    if args.dry_run:
        return dry_run(args)
    progress = make_progress(args, "upload")
    with json_errors(args), client_errors(), make_client(args) as client:
        result = client.upload(
            args.path,
            dandiset=args.dandiset,
            name=args.name,
            zarr_id=args.zarr_id,
            sync=args.sync,
            cancel_open_batch=args.cancel_open_batch,
            hash_jobs=args.hash_jobs,
            **({"max_batch_files": args.batch_files} if args.batch_files else {}),
            checksum_timeout=args.checksum_timeout,
            pack=args.pack,
            shard_target_bytes=args.shard_size,
            progress=progress,
        )
    return report(args, result)


def dry_run(args: argparse.Namespace) -> int:
    """What the upload would change, nothing sent: deletions only with --sync (without it the
    archive keeps what the local tree lacks)."""
    from dandizarr.client.tree_diffs import Diff, upload_changes
    from dandizarr.client.upload_types import hash_jobs
    from dandizarr.commands.diff import print_diff

    with json_errors(args), client_errors(), make_client(args) as client:
        zarr_id = args.zarr_id
        if zarr_id:
            # One the user may not read is an error, not an empty archive (every file added).
            client.get_archive(zarr_id)
        else:
            client.get_dandiset(args.dandiset)  # "does not exist" before anything else
            # As the upload names it (dandizarr.client.upload): the directory's name.
            name = args.name or Path(args.path).resolve().name
            found = client.find_archive(args.dandiset, name)
            zarr_id = found.zarr_id if found is not None else None
        diff, kept = Diff(), 0
        jobs = hash_jobs(args.hash_jobs)
        for change in upload_changes(client, Path(args.path), zarr_id, jobs=jobs):
            if change.kind == "deleted" and not args.sync:
                kept += 1
                continue
            diff.add(change)
    print_diff(diff, as_json=args.json)
    if kept and not args.json:
        print(f"({kept} files of the archive not in {args.path} are kept: --sync deletes them)")
    return 0
