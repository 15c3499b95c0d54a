"""What loose and pack batches share: opening one (one per archive, no file/directory
clashes), and the report of what was not uploaded as declared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction

from dandizarr.checksums.paths import basename, directories_above, folded, parent
from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive
from dandizarr_server.zarr_api.parsers.problems import Problem, invalid
from dandizarr_server.zarr_api.runtime import metrics
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import ArchiveSnapshot, archive_snapshot
from dandizarr_server.zarr_api.selectors.batch_states import has_open_batch
from dandizarr_server.zarr_api.selectors.expected_uploads import declared_at
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
    require_not_converting,
)
from dandizarr_server.zarr_api.services.batch_endings import batch_endings_settle
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert
from dandizarr_server.zarr_api.services.part_pages import PartPage
from dandizarr_server.zarr_api.services.url_lifetimes import upload_urls_issued

# Marks the upload batch that DANDI's POST files/ opened (and that later POST files/ add to).
OPEN_UPLOAD_NOTE = "open upload (POST files/)"


@dataclass(frozen=True)
class UploadTarget:
    path: str
    upload_url: str | None
    # A file sent in parts (services.multipart_uploads): its first page of part URLs.
    parts: PartPage | None = None


def upload_urls_sign(keys_and_md5s: Sequence[tuple[str, str]], *, acl: str = "") -> list[str]:
    """Presigned PUT URLs bound to each md5 (with ``acl``: requiring that X-Amz-ACL header
    instead, for dandi-cli <= 0.48; completion verifies either way). Called inside the
    transaction that opens the batch, so a failure to sign rolls the batch back instead of
    leaving it open."""
    expires_in = settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
    if acl:
        return get_store().presigned_put_urls_with_acl(
            [key for key, _ in keys_and_md5s], acl, expires_in=expires_in
        )
    return get_store().presigned_put_urls(keys_and_md5s, expires_in=expires_in)


def upload_targets_sign(
    entries: Sequence[tuple[str, str, str]], *, acl: str = ""
) -> list[UploadTarget]:
    """A target per ``(name, key, md5)``, in order: a PUT URL for ``key`` bound to its md5 (or
    requiring ``acl``), named as the client declared it (a file's path, a shard's name). The
    one way upload, DANDI and pack batches hand out single PUTs (a big file's parts:
    ``multipart_uploads``)."""
    urls = upload_urls_sign([(key, md5) for _, key, md5 in entries], acl=acl)
    return [UploadTarget(name, url) for (name, _, _), url in zip(entries, urls, strict=True)]


def open_batch_create(
    *, user: Requester, archive: ZarrArchive, kind: Batch.Kind, paths: Sequence[str]
) -> Batch:
    """Lock the archive, check it may take a batch of ``paths``, and open one; the caller's
    transaction adds the batch's files or shards."""
    archive = lock_archive(archive)
    require_writer(user, archive.dandiset)
    require_not_converting(archive)
    if kind == Batch.Kind.PACK and archive.layout != ZarrArchive.Layout.SHARDED:
        raise Conflict(
            f"zarr archive {archive.zarr_id} is loose; shards can only be uploaded into an "
            'archive created with "layout": "sharded" (or converted with POST pack/)',
            code="archive_not_sharded",
        )
    if has_open_batch(archive):
        raise Conflict(
            f"zarr archive {archive.zarr_id} already has an upload batch in progress; "
            "complete or cancel it first",
            code="open_batch_exists",
        )
    batch_endings_settle(archive)
    check_file_directory_clashes(paths, archive_snapshot(archive, cached=True))
    upload_urls_issued(archive)
    try:
        with transaction.atomic():
            created = Batch.objects.create(
                archive=archive,
                kind=kind,
                state=Batch.State.OPEN,
                user=recorded_user(user),
                directories=sorted(directories_above(paths)) if kind == Batch.Kind.UPLOAD else [],
            )
        transaction.on_commit(lambda: metrics.batch_started(kind))
        return created
    except IntegrityError as error:  # the unique constraint caught a concurrent start
        raise Conflict(
            f"zarr archive {archive.zarr_id} already has an upload batch in progress",
            code="open_batch_exists",
        ) from error


def open_batch_join(
    *, user: Requester, archive: ZarrArchive, batch: Batch, files: Sequence[FileDeclaration]
) -> None:
    """Add ``files`` to the open upload ``batch`` of the locked ``archive``: a path it holds
    already takes the new md5 (a retried request, or a file changed since); the batch may hold
    at most ``DANDIZARR_OPEN_BATCH_FILE_LIMIT`` files. The caller has checked that ``user``
    may write to the archive, and signs their URLs.

    Reads only the rows of the paths asked for, the count and the batch's directories: a batch
    grows a request at a time, and reading and checking all of it each time was quadratic."""
    require_not_converting(archive)
    paths = [f.path for f in files]
    known = declared_at(batch, paths)
    added = sorted(set(paths) - known.keys())
    held = batch.files.count()
    limit = settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT
    if held + len(added) > limit:
        raise ValidationFailed(
            f"the batch would hold {held + len(added)} files; at most {limit} are allowed "
            "before it is completed",
            code="batch_too_large",
        )
    check_file_directory_clashes(added, archive_snapshot(archive, cached=True))
    # Against the batch (while it is open no other batch commits, so what it holds was
    # checked against the archive when it joined): files where it has directories, and
    # directories where it has files.
    held_directories = set(batch.directories)
    ancestors = directories_above(added)
    clashing = {p for p in added if p in held_directories}
    clashing |= declared_at(batch, sorted(ancestors)).keys()
    if clashing:
        raise invalid(
            "paths",
            [{"path": p, "problem": "is also a directory in this batch"} for p in sorted(clashing)],
        )
    upload_urls_issued(archive)
    for f in files:
        if f.path in known and known[f.path][1] != f.md5:
            BatchFile.objects.filter(pk=known[f.path][0]).update(md5=f.md5)
    batch_files_insert(batch.pk, ((f.path, f.md5, None) for f in files if f.path not in known))
    if not ancestors <= held_directories:
        batch.directories = sorted(held_directories | ancestors)
        batch.save(update_fields=["directories"])


def open_batch_directories_reset(batch: Batch) -> None:
    """Files left an open upload batch: its directories are those of the files it still holds."""
    paths = batch.files.values_list("path", flat=True)
    batch.directories = sorted(directories_above(paths))
    batch.save(update_fields=["directories"])


def check_file_directory_clashes(paths: Sequence[str], snapshot: ArchiveSnapshot) -> None:
    """A file may not share its path with a directory, in the batch or in the archive."""
    batch = set(paths)
    ancestors = directories_above(batch)
    # Every .checksum the checks below read, in one read_many (in parallel, what the cache
    # lacks), not one GET after another as each check meets a new directory.
    snapshot.load({parent(p) for p in batch} | {parent(a) for a in ancestors})
    problems: list[Problem] = []
    for path in paths:
        if path in ancestors:
            problems.append({"path": path, "problem": "is also a directory in this batch"})
    for path in paths:
        if snapshot.is_directory(path):
            problems.append({"path": path, "problem": "is a directory in the archive"})
    for ancestor in sorted(ancestors - batch):
        if snapshot.file_state(ancestor) is not None:
            clashing = next(p for p in paths if p.startswith(ancestor + "/"))
            problems.append(
                {"path": clashing, "problem": f"would be inside {ancestor!r}, which is a file"}
            )
    # Names the archive holds in the same directory that a download would make one file of.
    for path in sorted(batch | ancestors):
        directory, name = parent(path), basename(path)
        held = snapshot.folded_names(directory).get(folded(name))
        if held is not None and held != name:
            other = f"{directory}/{held}" if directory else held
            problems.append(
                {
                    "path": path,
                    "problem": f"differs from {other!r} in the archive only by case or "
                    "Unicode form",
                }
            )
    if problems:
        raise invalid("paths", problems)


@dataclass
class Verification:
    """What storage holds of a batch's uploads that it should not: missing or other bytes."""

    missing: list[str] = field(default_factory=list)
    mismatched: list[dict[str, str]] = field(default_factory=list)

    def raise_unless_complete(self) -> None:
        if not self.missing and not self.mismatched:
            return
        metrics.ETAG_MISMATCHES.inc(len(self.missing) + len(self.mismatched))
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing ({', '.join(self.missing[:5])})")
        if self.mismatched:
            names = ", ".join(m["path"] for m in self.mismatched[:5])
            parts.append(f"{len(self.mismatched)} with another md5 ({names})")
        raise ValidationFailed(
            "the batch is not complete: " + "; ".join(parts) + ". Upload them again and "
            "complete again, or cancel the batch",
            code="batch_incomplete",
            verified=False,
            missing=self.missing,
            mismatched=self.mismatched,
        )
