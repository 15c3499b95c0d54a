"""A write session's commit (docs/writing.md): its staged files checked in storage, then, in
one short transaction under the archive's row lock, the conflict check and one pending batch
of kind ``session`` that the tree update applies like any other: every file and deletion of
the session reaches the tree (and every route) in the one transaction that applies it.

The staged objects become one-member shards (a Shard row each, verified: a single PUT's ETag
is its md5; a big file's md5 is proven by the tree update, ``multipart_proofs``), so the tree
update moves member rows to them as it does for a pack batch, and the loose objects of the
paths it packs are deleted after it commits (``member_locations.stale_loose_copies_delete``);
those of the paths it deletes, by ``services.session_cleanup``.
"""

from __future__ import annotations

from collections.abc import Collection, Set

from django.db import connection, transaction
from django.utils import timezone

from dandizarr.checksums.paths import directories_above
from dandizarr_server.zarr_api.domain.permissions import Requester
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import (
    Batch,
    BatchFile,
    MultipartUpload,
    SessionFile,
    Shard,
    WriteSession,
    ZarrArchive,
)
from dandizarr_server.zarr_api.parsers.problems import invalid
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.services.archive_locks import lock_archive, require_not_converting
from dandizarr_server.zarr_api.services.batch_endings import batch_endings_settle
from dandizarr_server.zarr_api.services.batch_rules import Verification
from dandizarr_server.zarr_api.services.write_sessions import session_end, session_lock

# Staged files whose objects are checked per storage request batch (head_many lists ranges).
_VERIFY_CHUNK = 10_000
# The states of a batch that changed the draft.
_CHANGED = (Batch.State.PENDING, Batch.State.APPLIED)


def session_commit(*, user: Requester, archive: ZarrArchive, session: WriteSession) -> Batch:
    """Make every change of the session the draft's, at once; the batch that does it (its
    tree update follows). 409 ``session_conflict`` (nothing changed) when a batch sequenced
    since the session began changed a path the session changed, or a directory above one."""
    with transaction.atomic():
        session_lock(user, archive, session)  # who may commit, before storage is asked
    proven = staged_files_verify(session)
    with transaction.atomic():
        archive = lock_archive(archive)  # the archive first, then the session (lock order)
        session = session_lock(user, archive, session)
        require_not_converting(archive)
        batch_endings_settle(archive)  # deletions in progress take their sequence first
        staged_files_verify(session, proven)  # any staged while the first check ran
        written, deleted = _session_paths(session)
        _check_within(written)
        _check_conflicts(archive, session, written, deleted)
        batch = Batch.objects.create(
            archive=archive,
            kind=Batch.Kind.SESSION,
            state=Batch.State.PENDING,
            user=session.user,
            sequence=next_sequence(archive),
            completed=timezone.now(),
            note=f"write session {session.session_id}",
        )
        _batch_rows_insert(archive, session, batch)
        # Its big files: proven from their bytes by the tree update before it applies the
        # batch (``multipart_proofs``), as a batch's are.
        MultipartUpload.objects.filter(
            session=session,
            state=MultipartUpload.State.COMPLETED,
            key__in=SessionFile.objects.filter(session=session, deleted=False).values("key"),
        ).update(batch=batch)
        session_end(session, WriteSession.State.COMMITTED)
        WriteSession.objects.filter(pk=session.pk).update(batch=batch)
        tree_update_schedule(archive)
        crash_point("session:commit-inserted")
    return batch


def staged_files_verify(session: WriteSession, proven: Set[int] | None = None) -> set[int]:
    """Each staged file not yet verified (nor in ``proven``, the ids an earlier pass of this
    commit proved), against storage: its object there with its md5 and size (a single PUT's
    ETag is its md5); the ids it proved. 400 ``session_incomplete`` naming what is not.

    Nothing is written back: marking 100,000 rows verified cost more than listing their
    objects (issue #48's 100,000-file commit), and a commit verifies each row once outside
    its lock, then only the rows staged meanwhile under it."""
    result = Verification()
    # In key order: each chunk's keys lie together in storage, so listing their range finds
    # them (in another order a range strays over the session's other keys and every key is
    # asked for alone: 100,000 HEADs for a 100,000-file commit).
    pending = SessionFile.objects.filter(session=session, deleted=False, verified=False)
    if proven is not None:
        # Under the lock: only the rows the first pass did not prove (staged meanwhile; a
        # path staged again is a new row). Many of them: all again, a range at a time.
        ids = set(pending.values_list("pk", flat=True).iterator(chunk_size=_VERIFY_CHUNK))
        if len(unseen := ids - proven) <= _VERIFY_CHUNK:
            pending = pending.filter(pk__in=sorted(unseen))
    good: set[int] = set()
    after = ""
    columns = ("pk", "path", "key", "md5", "size")
    while rows := list(
        pending.filter(key__gt=after).order_by("key").values_list(*columns)[:_VERIFY_CHUNK]
    ):
        after = rows[-1][2]
        infos = get_store().head_many([key for _, _, key, _, _ in rows])
        for pk, path, key, md5, size in rows:
            info = infos[key]
            if info is None:
                result.missing.append(path)
            elif (info.etag, info.size) != (md5, size):
                result.mismatched.append(
                    {
                        "path": path,
                        "expected": f"{md5} ({size} bytes)",
                        "actual": f"{info.etag} ({info.size} bytes)",
                    }
                )
            else:
                good.add(pk)
        if result.missing or result.mismatched:
            break
    if result.missing or result.mismatched:
        names = [*result.missing, *(m["path"] for m in result.mismatched)]
        raise ValidationFailed(
            f"{len(names)} staged files are not in storage as declared "
            f"({', '.join(repr(n) for n in names[:5])}): PUT them again, then commit again",
            code="session_incomplete",
            # Named up to edge.echo's LISTED_ITEMS, with their counts (a session holds up to
            # DANDIZARR_WRITE_SESSION_FILE_LIMIT files).
            missing=result.missing,
            mismatched=result.mismatched,
        )
    return good


def _session_paths(session: WriteSession) -> tuple[set[str], set[str]]:
    rows = SessionFile.objects.filter(session=session).values_list("path", "deleted")
    written: set[str] = set()
    deleted: set[str] = set()
    for path, gone in rows.iterator(chunk_size=5000):
        (deleted if gone else written).add(path)
    return written, deleted


def _check_within(written: Collection[str]) -> None:
    """No file of the session where it put a directory."""
    clashes = sorted(directories_above(written) & set(written))
    if clashes:
        raise invalid(
            "paths",
            [{"path": p, "problem": "is a file and a directory in this session"} for p in clashes],
        )


def _check_conflicts(
    archive: ZarrArchive, session: WriteSession, written: set[str], deleted: set[str]
) -> None:
    since = Batch.objects.filter(
        archive=archive, sequence__gt=session.base_sequence, state__in=_CHANGED
    )
    if not since.exists():
        return
    changed = set(
        BatchFile.objects.filter(batch__in=since).values_list("path", flat=True).iterator()
    )
    # The same path; a file changed where the session put a directory; a directory made
    # where the session put a file.
    clashes = (changed & (written | deleted)) | (changed & directories_above(written))
    clashes |= written & directories_above(changed)
    if clashes:
        shown = ", ".join(repr(p) for p in sorted(clashes)[:5])
        raise Conflict(
            f"the draft of zarr archive {archive.zarr_id} changed since write session "
            f"{session.session_id} began, at {len(clashes)} of the paths it changed ({shown}); "
            "nothing was committed: begin a new session on the draft as it is now",
            code="session_conflict",
            paths=sorted(clashes),
        )


def _batch_rows_insert(archive: ZarrArchive, session: WriteSession, batch: Batch) -> None:
    """A one-member Shard per staged file and the batch's rows, copied by the database from
    the session's rows (100,000 of them never come to Python)."""
    q = connection.ops.quote_name
    shard, member, staged = (q(m._meta.db_table) for m in (Shard, BatchFile, SessionFile))
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {shard} (archive_id, batch_id, name, {q('key')}, size, md5, state, "
            "verified, dead_bytes, chunks_per_shard, created) "
            f"SELECT %s, %s, path, {q('key')}, size, md5, %s, %s, 0, NULL, %s FROM {staged} "
            "WHERE session_id = %s AND deleted = %s",
            [archive.pk, batch.pk, Shard.State.PENDING, True, now, session.pk, False],
        )
        cursor.execute(
            f"INSERT INTO {member} (batch_id, path, md5, size, shard_id, {q('offset')}, slot) "
            f"SELECT %s, f.path, f.md5, f.size, s.id, 0, NULL FROM {staged} AS f "
            f"JOIN {shard} AS s ON s.{q('key')} = f.{q('key')} "
            "WHERE f.session_id = %s AND f.deleted = %s",
            [batch.pk, session.pk, False],
        )
        cursor.execute(
            f"INSERT INTO {member} (batch_id, path, md5, size, shard_id, {q('offset')}, slot) "
            f"SELECT %s, path, '', NULL, NULL, NULL, NULL FROM {staged} "
            "WHERE session_id = %s AND deleted = %s",
            [batch.pk, session.pk, True],
        )
