"""Looking up packed files' member rows costs their paths, never the archive, whatever
PostgreSQL's statistics say (issue #39).

The shape that made a 10,000,000-file upload take 31x the time of 1,000,000: an archive that
grows in a table whose statistics were taken before it did (autovacuum lags behind a table that
grows by 100,000 rows a batch, or is off, as on this machine). Given ``archive_id = %s AND path
IN (...)``, the planner took the archive for a few rows and scanned every member of it for each
list of paths. Here the statistics are taken while the table holds another archive's members
only, the archive then grows, and every query a look-up sends is run again under ``EXPLAIN
ANALYZE``: the member rows it reads must be about the paths asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dandizarr_server.zarr_api.models import Dandiset, Shard, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.selectors.shard_members import (
    member_locations,
    member_rows_at,
    packed_paths,
)

pytestmark = pytest.mark.django_db

GROWN = 20_000  # the archive's members after the statistics were taken
ASKED = 300  # paths looked up (a third of them not packed)


def _archive_with_members(dandiset: Dandiset, name: str, count: int) -> ZarrArchive:
    archive = ZarrArchive.objects.create(name=name, dandiset=dandiset)
    shard = Shard.objects.create(archive=archive, name=name, key=f"{name}/0", size=64, md5="0")
    ShardMember.objects.bulk_create(
        (
            ShardMember(
                archive=archive,
                path=f"{i // 1000}/{i % 1000}",
                shard=shard,
                offset=0,
                length=64,
                md5="0" * 32,
            )
            for i in range(count)
        ),
        batch_size=5000,
    )
    return archive


def _member_rows_read(sql: str) -> int:
    """Rows of the member table a query's plan read (scanned, before any filter)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return sum(_reads(plan[0]["Plan"]))


def _reads(node: dict[str, Any]) -> Iterator[int]:
    if node.get("Relation Name") == ShardMember._meta.db_table:
        loops = node.get("Actual Loops", 1)
        yield (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * loops
    for child in node.get("Plans", []):
        yield from _reads(child)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner is the subject")
def test_member_lookups_read_their_paths_rows_not_the_archives() -> None:
    dandiset = Dandiset.objects.create(name="plans")
    _archive_with_members(dandiset, "settled", GROWN)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ShardMember._meta.db_table}")  # before the archive grows
    archive = _archive_with_members(dandiset, "growing", GROWN)
    packed = [f"{i // 1000}/{i % 1000}" for i in range(0, GROWN, GROWN * 3 // (ASKED * 2))]
    asked = packed[: ASKED * 2 // 3] + [f"loose/{i}" for i in range(ASKED - ASKED * 2 // 3)]

    with CaptureQueriesContext(connection) as queries:
        locations = member_locations(archive, asked)
        rows = list(member_rows_at(archive, asked))
        found = packed_paths(archive, asked)
    assert set(locations) == found == {row[3] for row in rows} == set(packed[: ASKED * 2 // 3])

    member_queries = [q["sql"] for q in queries.captured_queries if "shardmember" in q["sql"]]
    assert member_queries
    for sql in member_queries:
        read = _member_rows_read(sql)
        # One probe per path: at most a row per path asked (the archive holds 20,000).
        assert read <= ASKED, f"read {read} member rows for {ASKED} paths: {sql[:200]}"
