"""``SessionNote``: a note on local disk saying "the upload of this source into this archive
writes into that session, and these files of it are in storage", so that a remote upload
killed midway is resumed into the same session (``remote_upload``).

The session's own record cannot say which of its staged files were PUT: a file is staged
(its URL handed out) before its bytes are sent, so a run killed between the two leaves a
staged file that storage does not hold (the commit would refuse it: ``session_incomplete``).
The note lists each file once storage answered its PUT, as ``big_files``' part journal does.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from dandizarr.client.journal import state_dir


@dataclass
class SessionNote:
    server: str
    zarr_id: str
    source: str
    _sent: TextIO | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def path(self) -> Path:
        key = hashlib.sha256(f"{self.server}\n{self.zarr_id}\n{self.source}".encode())
        return state_dir() / f"session-{key.hexdigest()[:24]}.json"

    @property
    def sent_path(self) -> Path:
        return self.path.with_suffix(".sent")

    def load(self) -> str | None:
        """The session a previous run noted, if any."""
        try:
            return str(json.loads(self.path.read_text())["session_id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self, session_id: str) -> None:
        """A new session: noted (before anything is staged in it), with no file sent yet."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sent_path.unlink(missing_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        note = {"server": self.server, "zarr_id": self.zarr_id, "source": self.source}
        tmp.write_text(json.dumps({**note, "session_id": session_id}))
        tmp.replace(path)

    def sent(self) -> set[tuple[str, str]]:
        """(path, md5) of each file a previous run's PUT put in storage."""
        found: set[tuple[str, str]] = set()
        try:
            with self.sent_path.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        path, md5 = json.loads(line)
                    except ValueError:  # a line a kill cut short
                        continue
                    found.add((str(path), str(md5)))
        except FileNotFoundError:
            pass
        return found

    def mark_sent(self, path: str, md5: str) -> None:
        """Storage holds ``path`` with ``md5`` (a line written at once: a kill keeps it)."""
        line = json.dumps([path, md5]) + "\n"
        with self._lock:
            if self._sent is None:
                self.sent_path.parent.mkdir(parents=True, exist_ok=True)
                self._sent = self.sent_path.open("a", encoding="utf-8", buffering=1)
            self._sent.write(line)

    def close(self) -> None:
        with self._lock:
            if self._sent is not None:
                self._sent.close()
                self._sent = None

    def clear(self) -> None:
        """The session ended: nothing to resume."""
        self.close()
        self.path.unlink(missing_ok=True)
        self.sent_path.unlink(missing_ok=True)
