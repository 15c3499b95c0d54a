"""A note on local disk saying "this machine opened a batch on that archive".

The service does not say who opened a batch, so after a client is killed mid-batch the next
run needs this note to tell its own leftover batch (complete it or cancel it, then go on) from
another client's (leave it alone unless told to cancel it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path


def state_dir() -> Path:
    explicit = os.environ.get("DANDIZARR_STATE_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dandizarr" / "batches"


@dataclass
class BatchJournal:
    server: str
    zarr_id: str
    directory: Path | None = None

    @property
    def path(self) -> Path:
        key = hashlib.sha256(f"{self.server}\n{self.zarr_id}".encode()).hexdigest()[:24]
        return (self.directory or state_dir()) / f"{key}.json"

    def record(self, file_count: int) -> None:
        """Written before the batch is requested, so a kill right after still leaves it."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps(
                {
                    "server": self.server,
                    "zarr_id": self.zarr_id,
                    "files": file_count,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started": time.time(),
                }
            )
        )
        os.replace(tmp, path)

    def exists(self) -> bool:
        return self.path.exists()

    def is_mine_to_resume(self) -> bool:
        """The note exists and its writer is gone: a run on this host that was killed.

        A note from another host (a home directory shared between machines) or from a run
        that is still alive (two uploads to one archive at once) is someone else's batch.
        """
        try:
            note = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return False
        if note.get("host") != socket.gethostname():
            return False
        pid = note.get("pid")
        if not isinstance(pid, int) or pid == os.getpid():
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
