"""The pack batch parser as it was before the body was streamed (issue #39): ``json.loads``'s
dict checked field by field. Kept only as the reference the streaming parser
(dandizarr_server.zarr_api.parsers.pack_batch) must agree with
(tests/zarr_api/test_pack_batch_stream.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeGuard

from django.conf import settings

from dandizarr.sharding.archive_packing import MemberRecord, member_problems
from dandizarr_server.zarr_api.domain.declarations import MemberDeclaration, ShardDeclaration
from dandizarr_server.zarr_api.domain.paths import etag_problem, path_problem, shard_name_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.problems import Problem, check_unique, invalid


def _is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


def parse_pack_batch(body: dict[str, Any]) -> list[ShardDeclaration]:
    """The shards of a pack batch within the limits, or a 400 naming every problem found.

    Consumes ``body``: each shard's ``members`` list is emptied once parsed. The parsed JSON
    of a batch's 100,000 members is about 30 MB of dicts and strings, and the request keeps
    its body until it ends; emptied, they are freed before the batch's rows are written."""
    declarations, problems = _parse_shards(body)
    if problems:
        raise invalid("shards", problems)
    limit = settings.DANDIZARR_BATCH_LIMIT
    if len(declarations) > limit:
        raise ValidationFailed(
            f"the batch has {len(declarations)} shards; at most {limit} are allowed"
        )
    members = [m for d in declarations for m in d.members]
    member_limit = settings.DANDIZARR_PACK_MEMBER_LIMIT
    if len(members) > member_limit:
        raise ValidationFailed(
            f"the batch declares {len(members)} member files; at most {member_limit} are allowed"
        )
    check_unique([m.path for m in members])  # each path was checked with its member
    return declarations


def _parse_shards(body: dict[str, Any]) -> tuple[list[ShardDeclaration], list[Problem]]:
    """The shards declared, and every problem found (each naming a shard or path)."""
    problems: list[Problem] = []
    raw_shards = body.get("shards")
    if not isinstance(raw_shards, list) or not raw_shards:
        return [], [{"path": "", "problem": '"shards" must be a non-empty list'}]
    declarations: list[ShardDeclaration] = []
    for index, raw in enumerate(raw_shards):
        if not isinstance(raw, dict):
            problems.append({"path": f"shards[{index}]", "problem": "must be an object"})
            continue
        name = raw.get("name")
        label = name if isinstance(name, str) else f"shards[{index}]"
        problem = shard_name_problem(name)
        if problem:
            problems.append({"path": label, "problem": f"shard name {problem}"})
        md5_problem = etag_problem(raw.get("etag"))
        if md5_problem:
            problems.append({"path": label, "problem": f"etag {md5_problem}"})
        size = raw.get("size")
        if not _is_count(size):
            problems.append({"path": label, "problem": "size must be a non-negative integer"})
            size = 0
        cps = raw.get("chunks_per_shard")
        if cps is not None and not (
            isinstance(cps, list) and cps and all(type(c) is int and c > 0 for c in cps)
        ):
            problems.append(
                {"path": label, "problem": "chunks_per_shard must be a list of positive integers"}
            )
            cps = None
        raw_members = raw.get("members")
        if not isinstance(raw_members, list) or not raw_members:
            problems.append({"path": label, "problem": '"members" must be a non-empty list'})
            continue
        members = _parse_members(label, raw_members, problems)
        raw_members.clear()
        records = (MemberRecord(m.path, m.offset, m.size, m.md5, m.slot) for m in members)
        for found in member_problems(records, size):
            problems.append(
                {"path": found["path"], "problem": f"in shard {label}: " + found["problem"]}
            )
        if isinstance(name, str):
            declarations.append(
                ShardDeclaration(name, str(raw.get("etag")), size, tuple(members), cps)
            )
    names = Counter(d.name for d in declarations)
    problems += [
        {"path": n, "problem": "shard name appears more than once"}
        for n, c in names.items()
        if c > 1
    ]
    return declarations, problems


def _parse_members(
    label: str, raw_members: list[Any], problems: list[Problem]
) -> list[MemberDeclaration]:
    """The well-formed members of one shard; the problems of the others go to ``problems``."""
    members = []
    for m_index, member in enumerate(raw_members):
        if not isinstance(member, dict):
            problems.append({"path": f"{label} members[{m_index}]", "problem": "not an object"})
            continue
        path = member.get("path")
        problem = path_problem(path)
        if problem or not isinstance(path, str):
            problems.append({"path": path, "problem": problem or "must be a string"})
            continue
        slot = member.get("slot")
        if slot is not None and not _is_count(slot):
            problems.append({"path": path, "problem": "slot must be a non-negative integer"})
        if not _is_count(member.get("offset")) or not _is_count(member.get("size")):
            problems.append(
                {"path": path, "problem": "offset and size must be non-negative integers"}
            )
            continue
        members.append(
            MemberDeclaration(
                path,
                str(member.get("md5")),
                member["size"],
                member["offset"],
                slot if _is_count(slot) else None,
            )
        )
    return members
