"""Recompute archives' .checksum trees from a storage listing and report any drift."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dandizarr_server.zarr_api.edge.exceptions import DomainError
from dandizarr_server.zarr_api.selectors.archive_audit import unreferenced_archives
from dandizarr_server.zarr_api.selectors.lookups import archive_zarr_ids, archives_for_operator
from dandizarr_server.zarr_api.services.audit import archive_audit


class Command(BaseCommand):
    help = "Audit zarr archives: rebuild the .checksum tree from storage, report and fix drift."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("zarr_ids", nargs="*", help="archives to audit (default: all)")
        parser.add_argument(
            "--report-only",
            action="store_true",
            help="change nothing: report drift and the archives storage holds that the "
            "database does not know (after restoring a backup)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        archives = archives_for_operator(options["zarr_ids"])
        if options["zarr_ids"] and archives.count() != len(set(options["zarr_ids"])):
            raise CommandError("some of the given zarr ids do not exist")
        drifted = 0
        for archive in archives:
            try:
                report = archive_audit(archive, repair=not options["report_only"])
            except DomainError as error:
                self.stderr.write(f"{archive.zarr_id}: skipped: {error.message}")
                continue
            if report.drift:
                drifted += 1
                done = "found (nothing changed)" if options["report_only"] else "repaired"
                self.stdout.write(
                    f"{archive.zarr_id}: DRIFT {done}: {report.checksum_before} -> "
                    f"{report.checksum_after}; rewrote {len(report.directories_rewritten)}, "
                    f"deleted {len(report.stale_checksum_files_deleted)} stale .checksum file(s); "
                    f"corrupted members: {[c['path'] for c in report.corrupted_members]}; "
                    f"deleted {len(report.stale_loose_copies_deleted)} stale loose copies and "
                    f"{len(report.orphan_shards_deleted)} orphan shard object(s); "
                    f"versions whose tree differs from their checksum: "
                    f"{report.versions_mismatched}"
                )
            else:
                self.stdout.write(f"{archive.zarr_id}: ok {report.checksum_after}")
        self.stdout.write(f"{drifted} archive(s) had drift")
        if not options["zarr_ids"]:
            unreferenced = unreferenced_archives(archive_zarr_ids())
            for zarr_id, count in sorted(unreferenced.items()):
                self.stdout.write(
                    f"{zarr_id}: UNREFERENCED: {count} object(s) no archive row knows"
                )
            self.stdout.write(f"{len(unreferenced)} unreferenced archive(s) in storage")
