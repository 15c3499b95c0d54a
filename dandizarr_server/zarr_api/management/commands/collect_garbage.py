"""``manage.py collect_garbage [--dry-run] [ZARR_ID ...]``: delete storage no draft or version
references, past the undelete window (docs/versions.md); a dry run reports what it would free."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dandizarr_server.zarr_api.selectors.lookups import archives_for_operator
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect


class Command(BaseCommand):
    help = "Delete object versions no draft or archive version references (past the window)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("zarr_ids", nargs="*", help="only these archives (default: all)")
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be freed; delete nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        freed = 0
        for archive in archives_for_operator(options["zarr_ids"]).iterator():
            report = archive_garbage_collect(archive, dry_run=options["dry_run"])
            freed += report.reclaimed_bytes
            self.stdout.write(json.dumps(asdict(report)))
        verb = "would free" if options["dry_run"] else "freed"
        self.stdout.write(f"{verb} {freed} bytes")
