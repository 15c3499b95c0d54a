"""Progress reporting. The client calls a ``Progress``; the CLI passes bars, a library caller
passes nothing (``NullProgress``) or its own implementation."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any, Protocol


class Progress(Protocol):
    def start(self, total_files: int, total_bytes: int | None) -> None:
        """The totals are known (after the local scan, or the remote listing for downloads);
        ``total_bytes`` is None when the sizes are learnt as the files are read (``--pack``)."""

    def advance(self, files: int, nbytes: int) -> None:
        """``files`` more files, ``nbytes`` more bytes are done (uploaded, skipped, fetched)."""

    def message(self, text: str) -> None:
        """A line for the user (a stage begins, a batch is retried, a file changed)."""

    def batch(self, number: int, paths: Sequence[str]) -> None:
        """Batch ``number`` (from 1) was opened on the server for these files; their PUTs
        start next."""

    def close(self) -> None: ...


class NullProgress:
    def start(self, total_files: int, total_bytes: int | None) -> None:
        pass

    def advance(self, files: int, nbytes: int) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def batch(self, number: int, paths: Sequence[str]) -> None:
        pass

    def close(self) -> None:
        pass


class TqdmProgress:
    """Two tqdm bars on stderr: files and bytes. Called from worker threads, hence the lock."""

    def __init__(self, description: str = "upload", *, file: Any = None) -> None:
        self._description = description
        self._file = file if file is not None else sys.stderr
        self._lock = threading.Lock()
        self._files: Any = None
        self._bytes: Any = None

    def start(self, total_files: int, total_bytes: int | None) -> None:
        from tqdm import tqdm

        with self._lock:
            self.close_unlocked()
            self._files = tqdm(
                total=total_files,
                desc=f"{self._description} files",
                unit="file",
                position=0,
                file=self._file,
                dynamic_ncols=True,
            )
            self._bytes = tqdm(
                total=total_bytes,
                desc=f"{self._description} bytes",
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                position=1,
                file=self._file,
                dynamic_ncols=True,
            )

    def advance(self, files: int, nbytes: int) -> None:
        with self._lock:
            if self._files is not None:
                self._files.update(files)
                self._bytes.update(nbytes)

    def message(self, text: str) -> None:
        from tqdm import tqdm

        with self._lock:
            tqdm.write(text, file=self._file)

    def batch(self, number: int, paths: Sequence[str]) -> None:
        with self._lock:
            if self._files is not None:
                self._files.set_postfix(batch=number, refresh=False)

    def close_unlocked(self) -> None:
        for bar in (self._bytes, self._files):
            if bar is not None:
                bar.close()
        self._files = self._bytes = None

    def close(self) -> None:
        with self._lock:
            self.close_unlocked()


class MessageProgress(NullProgress):
    """No bars, only the messages (for ``--json`` and non-interactive runs)."""

    def __init__(self, file: Any = None) -> None:
        self._file = file if file is not None else sys.stderr

    def message(self, text: str) -> None:
        print(text, file=self._file, flush=True)
