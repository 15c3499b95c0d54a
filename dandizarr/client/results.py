"""What an upload and a download return: ``UploadResult`` and ``DownloadResult``, with their
one-line summaries and JSON forms (the CLI prints these)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dandizarr.client.errors import ChecksumMismatch, ClientError


@dataclass
class UploadResult:
    server: str
    zarr_id: str = ""
    name: str = ""
    dandiset: str = ""
    local_files: int = 0
    local_bytes: int = 0
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    deleted_files: int = 0
    # Present on the server, absent locally, and kept (no --sync).
    remote_only_files: int = 0
    changed_files: list[str] = field(default_factory=list)
    batches: int = 0
    batch_restarts: int = 0
    # Of the uploaded files, those sent as members of shards, the shards and pack batches
    # (pack batches count in ``batches`` too).
    packed_files: int = 0
    packed_bytes: int = 0
    shards: int = 0
    pack_batches: int = 0
    put_requests: int = 0
    retries: int = 0
    elapsed_seconds: float = 0.0
    # Wall time of the serial steps: "scan" (listing both sides), "start" and "complete"
    # (the batch calls), "put" (waiting for a batch's PUTs), "verify" (the final checksum);
    # with pack, "build" (waiting for shards to be built) and "apply" (the server's check).
    phase_seconds: dict[str, float] = field(default_factory=dict)
    local_checksum: str | None = None
    expected_checksum: str | None = None
    server_checksum: str | None = None
    # The asset of the dandiset's draft that names the archive (path = the archive's name), once
    # the upload is verified: what publishing and `dandi download` see.
    asset_id: str | None = None

    @property
    def ok(self) -> bool:
        return (
            not self.changed_files
            and self.expected_checksum is not None
            and self.server_checksum == self.expected_checksum
        )

    @property
    def files_per_second(self) -> float:
        return self.uploaded_files / self.elapsed_seconds if self.elapsed_seconds else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.uploaded_bytes / self.elapsed_seconds if self.elapsed_seconds else 0.0

    def check(self) -> UploadResult:
        """Raise unless ``ok``: ChecksumMismatch, or ClientError naming the changed files."""
        if self.changed_files:
            raise ClientError(
                f"{len(self.changed_files)} files changed on disk during the upload and were not "
                f"uploaded, e.g. {self.changed_files[0]}"
            )
        if not self.ok:
            raise ChecksumMismatch(
                f"checksum mismatch: the server holds {self.server_checksum}, the local files "
                f"give {self.expected_checksum}",
                expected=self.expected_checksum or "",
                actual=self.server_checksum,
            )
        return self

    def add_time(self, phase: str, since: float) -> None:
        self.phase_seconds[phase] = round(
            self.phase_seconds.get(phase, 0.0) + time.perf_counter() - since, 3
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            ok=self.ok,
            files_per_second=round(self.files_per_second, 2),
            bytes_per_second=round(self.bytes_per_second, 1),
        )
        return data

    def summary(self) -> str:
        line = f"uploaded {self.uploaded_files:,} files ({format_bytes(self.uploaded_bytes)})"
        if self.shards:
            line += f", {self.packed_files:,} of them in {self.shards:,} shards"
        line += f", skipped {self.skipped_files:,} already on the server"
        if self.deleted_files:
            line += f", deleted {self.deleted_files:,}"
        line += (
            f"; {self.elapsed_seconds:.1f} s, {self.files_per_second:,.1f} files/s, "
            f"{format_bytes(self.bytes_per_second)}/s"
        )
        if self.ok:
            line += f"; checksum {self.server_checksum} verified"
        return line


def format_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB`` ... ``3.0 TiB`` (and beyond, still in TiB)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while abs(n) >= 1024 and power < len(units) - 1:
        n /= 1024
        power += 1
    return f"{n:.0f} B" if power == 0 else f"{n:.1f} {units[power]}"


@dataclass
class DownloadResult:
    server: str
    zarr_id: str
    dest: str
    prefix: str = ""
    files: int = 0
    bytes: int = 0
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    skipped_files: int = 0
    # Files fetched in byte ranges at once (big files: ranged_gets).
    ranged_files: int = 0
    failed_files: list[str] = field(default_factory=list)
    retries: int = 0
    elapsed_seconds: float = 0.0
    local_checksum: str | None = None
    server_checksum: str | None = None
    # A partial download's patterns (docs/partial-work.md), and what a download proved.
    includes: list[str] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)
    verified: str = ""

    @property
    def partial(self) -> bool:
        return bool(self.includes or self.excludes)

    @property
    def ok(self) -> bool:
        if self.partial:
            # A part of a tree cannot give the archive's checksum: each file was verified.
            return not self.failed_files
        return not self.failed_files and self.local_checksum == self.server_checksum

    def check(self) -> DownloadResult:
        """Raise ChecksumMismatch unless the downloaded tree has the server's checksum."""
        if not self.ok:
            raise ChecksumMismatch(
                f"checksum mismatch: the server holds {self.server_checksum}, the downloaded "
                f"files give {self.local_checksum}",
                expected=self.server_checksum or "",
                actual=self.local_checksum,
            )
        return self

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "partial": self.partial}

    def summary(self) -> str:
        rate = self.downloaded_files / self.elapsed_seconds if self.elapsed_seconds else 0.0
        line = (
            f"downloaded {self.downloaded_files:,} files ({format_bytes(self.downloaded_bytes)}), "
            f"kept {self.skipped_files:,} already present; {self.elapsed_seconds:.1f} s, "
            f"{rate:,.1f} files/s"
        )
        if self.partial:
            line += f"; {self.verified}"
        elif self.ok:
            line += f"; checksum {self.server_checksum} verified"
        return line
