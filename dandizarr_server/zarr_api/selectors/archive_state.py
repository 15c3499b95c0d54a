"""An archive's state as every reader shows it (the API's fields, the DANDI status, the pages):
one rule, from the annotations ``lookups.archives_annotated`` adds, or one query each."""

from __future__ import annotations

from dataclasses import dataclass

from dandizarr_server.zarr_api.models import Shard, ZarrArchive
from dandizarr_server.zarr_api.selectors.batch_states import has_changing_batches, has_open_batch


@dataclass(frozen=True)
class ArchiveState:
    # An upload batch is open (its files not verified yet).
    upload_open: bool
    # Verified changes, cancels or deletions not yet in the tree: the checksum is not final.
    tree_changing: bool
    live_shards: int

    @property
    def checksum_status(self) -> str:
        return "pending" if self.tree_changing else "complete"

    @property
    def dandi_status(self) -> str:
        """The DANDI API's: ``Pending`` while an upload is open, ``Ingesting`` while changes wait
        for the tree, ``Complete`` when the checksum is exactly what storage holds."""
        if self.upload_open:
            return "Pending"
        return "Ingesting" if self.tree_changing else "Complete"


def archive_state(archive: ZarrArchive) -> ArchiveState:
    if archive.as_of is not None:
        # A published version: complete, and never changing.
        return ArchiveState(False, False, 0)
    upload_open = getattr(archive, "has_open_batch", None)
    if upload_open is None:
        upload_open = has_open_batch(archive)
    changing = getattr(archive, "has_pending_batch", None)
    if changing is None:
        changing = has_changing_batches(archive)
    shards = getattr(archive, "live_shards", None)
    if shards is None:
        shards = archive.shards.filter(state=Shard.State.LIVE).count()
    return ArchiveState(bool(upload_open), bool(changing), int(shards))
