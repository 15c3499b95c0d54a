"""The one batch an upload may have open on its archive (the service allows one per archive,
loose or pack): starting it (recorded in the journal first), completing it, cancelling it, and
settling a batch an earlier run left open."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import requests

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import (
    NO_OPEN_BATCH,
    ApiError,
    BatchConflict,
    ClientError,
    Conflict,
    NotFound,
    OpenBatchLeft,
)
from dandizarr.client.journal import BatchJournal
from dandizarr.client.progress import Progress

_Started = TypeVar("_Started")


def _raise_unless_no_open_batch(error: NotFound) -> None:
    """A 404 completing or cancelling a batch means it is closed already (an earlier try's
    answer was lost), unless its code says something else is missing (the archive)."""
    if error.code not in (NO_OPEN_BATCH, None):
        raise error


def _named(item: Any) -> str:
    """A file or shard named in a 400 of complete: a name, or ``{"name"|"path", ...}``."""
    if isinstance(item, dict):
        return str(item.get("name") or item.get("path") or item)
    return str(item)


class BatchSession:
    """Our batches on archive ``zarr_id``, one open at a time, whichever kind."""

    def __init__(
        self, client: ApiClient, zarr_id: str, progress: Progress, *, wait_timeout: float
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.progress = progress
        self.wait_timeout = wait_timeout
        self.journal = BatchJournal(client.server, zarr_id)
        self.is_open = False
        self.opened = 0  # batches opened so far (numbers them for the progress display)

    @property
    def may_be_open(self) -> bool:
        """Ours is open, or our POST may have opened one whose answer never came back."""
        return self.is_open or self.journal.exists()

    def _upload_url(self) -> str:
        return self.client.url(f"/api/zarr/{self.zarr_id}/upload/")

    # --- before the upload -------------------------------------------------------------------

    def settle_leftover(self, *, cancel_others: bool) -> None:
        """Deal with a batch left open on the archive before starting our own: this machine's
        (its run was killed) is completed, or cancelled when its files are not all there;
        another client's is cancelled only with ``cancel_others``."""
        if not self.client.has_open_batch(self.zarr_id):
            self.journal.clear()
            return
        if self.journal.is_mine_to_resume():
            self.progress.message("finishing this machine's batch left open by an earlier run")
            try:
                response = self.client.complete_batch(self.zarr_id)
            except NotFound as error:
                _raise_unless_no_open_batch(error)
                response = None
            if response is not None and response.status_code != 200:
                self.progress.message("  its files are not all there; cancelling it")
                self.client.cancel_batch(self.zarr_id)
            elif response is not None:
                self._wait_for_leftover_pack(response)
            self.journal.clear()
            return
        if cancel_others:
            self.progress.message("cancelling the batch another client left open")
            self.client.cancel_batch(self.zarr_id)
            return
        raise OpenBatchLeft(self.zarr_id, url=self._upload_url())

    def _wait_for_leftover_pack(self, response: requests.Response) -> None:
        """A pack batch completed on resume is applied by the server's worker: wait for it,
        so the listing that follows includes its files (a failed one is simply redone)."""
        body = response.json() if response.content else {}
        batch_id = body.get("batch") if isinstance(body, dict) else None
        if not isinstance(batch_id, int):
            return
        with contextlib.suppress(NotFound):
            batch = self.client.wait_for_batch(
                self.zarr_id, batch_id, timeout=self.wait_timeout, progress=self.progress
            )
            if batch.get("state") == "failed":
                self.progress.message(
                    f"  the server refused that batch ({batch.get('error')}); its files are "
                    "sent again"
                )

    # --- one batch ---------------------------------------------------------------------------

    def start(
        self, post: Callable[[], _Started], *, files: int, paths: list[str], kind: str
    ) -> _Started:
        """Open our batch by calling ``post`` (the client's POST of a loose or a pack batch),
        noted in the journal first.

        A 409 open batch (``BatchConflict``) is another client's, unless the POST was retried:
        then our first try opened the batch and its answer was lost, so it is cancelled and
        posted again. A 409 for another reason (a loose archive refusing shards, a conversion
        into shards running) is told as the server says it, and a 400 naming paths with them.
        """
        self.journal.record(files)
        retries_before = self.client.retries.count
        try:
            started = post()
        except BatchConflict as error:
            if self.client.retries.count == retries_before:
                self.journal.clear()
                raise BatchConflict(
                    f"another upload batch was opened on zarr archive {self.zarr_id} while this "
                    "upload was running; another client is uploading to it",
                    status=409,
                    method="POST",
                    url=self._upload_url(),
                    body=error.body,
                ) from None
            self.client.cancel_batch(self.zarr_id)
            started = post()
        except Conflict as error:
            self.journal.clear()
            raise ClientError(f"the server refused the {kind}: {error.detail}") from None
        except ApiError as error:
            self.journal.clear()
            named = error.body.get("paths") if isinstance(error.body, dict) else None
            if named:
                shown = ", ".join(map(str, named[:5])) + (" ..." if len(named) > 5 else "")
                message = f"the server refused the {kind}: {error.detail}: {shown}"
                raise ClientError(message) from None
            raise
        self.is_open = True
        self.opened += 1
        self.progress.batch(self.opened, paths)
        return started

    def complete(
        self, resend: Callable[[set[str]], None], *, kind: str
    ) -> requests.Response | None:
        """Complete our batch. When storage lost or garbled some PUTs it had acknowledged, the
        server names them: ``resend`` PUTs those (file paths or shard names) again, each once.
        An error names a hundred at most (its ``missing_count`` says how many there are), so
        completing goes on while it names some not yet sent again. Returns the 200, or None
        when an earlier try completed it and its answer was lost (the final checksum
        comparison catches anything else)."""
        resent: set[str] = set()
        while True:
            try:
                response: requests.Response | None = self.client.complete_batch(self.zarr_id)
            except NotFound as error:
                _raise_unless_no_open_batch(error)
                response = None
            if response is None or response.status_code == 200:
                self.closed()
                return response
            body = response.json() if response.content else {}
            missing = {_named(m) for m in body.get("missing", [])}
            missing.update(_named(m) for m in body.get("mismatched", []))
            if not missing or missing <= resent:
                raise ClientError(
                    f"the server did not accept the {kind}: {body.get('detail', body)}"
                    + (f" ({', '.join(sorted(missing)[:5])})" if missing else "")
                )
            resend(missing - resent)
            resent |= missing

    def closed(self) -> None:
        """Our batch is completed or cancelled: nothing to clean up on the way out."""
        self.is_open = False
        self.journal.clear()

    def cancel(self) -> None:
        self.client.cancel_batch(self.zarr_id)
        self.closed()

    def cancel_quietly(self) -> None:
        """Cancel our batch on the way out of a failure; the original error matters more."""
        with contextlib.suppress(Exception):
            self.cancel()
