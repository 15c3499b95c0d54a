"""Shards of a whole Zarr archive (see ``docs/sharded.md``): not a shard format of its own, but
how the server and the client pack an archive's chunk *files* into shard objects.

The archive keeps its files exactly as written; the chunk files of each array are stored in
shard objects laid out as ``sharding_indexed`` shards of that array's chunk grid (member bytes,
then the index with crc32c). Everything here is pure (no Django, no network), so the server,
the client and the tests share one notion of what a chunk file is and where its bytes live.

* ``chunk_grids``: which paths are chunk files (grids from ``.zarray`` / ``zarr.json``);
* ``plans``: shard layouts of a grid and the grouping of paths into shards;
* ``shard_objects``: writing a shard object and checking its declared members.
"""

from dandizarr.sharding.archive_packing.chunk_grids import (
    METADATA_NAMES,
    ChunkGrid,
    PackingError,
    find_grids,
    grid_from_metadata,
)
from dandizarr.sharding.archive_packing.plans import (
    DEFAULT_SHARD_BYTES,
    MAX_PLANNED_PATHS,
    POSITION_TYPECODE,
    IndexedShardPlan,
    LayoutLookup,
    PlannedMember,
    ShardLayout,
    ShardPlan,
    default_chunks_per_shard,
    plan_shard_indices,
    plan_shard_positions,
    plan_shards,
)
from dandizarr.sharding.archive_packing.shard_objects import (
    BuiltShard,
    MemberRecord,
    build_shard,
    member_problems,
    verify_members,
)

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "MAX_PLANNED_PATHS",
    "METADATA_NAMES",
    "POSITION_TYPECODE",
    "BuiltShard",
    "ChunkGrid",
    "IndexedShardPlan",
    "LayoutLookup",
    "MemberRecord",
    "PackingError",
    "PlannedMember",
    "ShardLayout",
    "ShardPlan",
    "build_shard",
    "default_chunks_per_shard",
    "find_grids",
    "grid_from_metadata",
    "member_problems",
    "plan_shard_indices",
    "plan_shard_positions",
    "plan_shards",
    "verify_members",
]
