"""The body of a pack batch (POST upload/ with {"shards": [...]}, docs/sharded.md), read from
the JSON body's parse events member by member: a batch's 100,000 members become compact
declarations as they pass, never dicts all at once (docs/performance.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from django.conf import settings

from dandizarr.sharding.archive_packing import MemberRecord, member_problems
from dandizarr_server.zarr_api.domain.declarations import MemberDeclaration, ShardDeclaration
from dandizarr_server.zarr_api.domain.paths import etag_problem, path_problem, shard_name_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.json_stream import (
    OPENERS,
    Event,
    JsonBody,
    json_events,
    json_parse_errors,
    skip_value,
    value_of,
)
from dandizarr_server.zarr_api.parsers.problems import Problem, check_unique, invalid

_MEMBER_KEYS = frozenset(("path", "md5", "size", "offset", "slot"))
_SHARD_KEYS = frozenset(("name", "etag", "size", "chunks_per_shard"))


@dataclass(frozen=True, slots=True)
class PackBatchBody:
    """``request.data`` of a pack batch: its shards, parsed and checked as the body was read."""

    shards: list[ShardDeclaration]


def pack_batch_shards(data: object) -> list[ShardDeclaration]:
    """The shards of a body that is a JSON object. One that was not read as JSON (a form, an
    empty body) declares no list of shards."""
    if isinstance(data, PackBatchBody):
        return data.shards
    raise invalid("shards", [_no_shards()])


def _no_shards() -> Problem:
    return {"path": "", "problem": '"shards" must be a non-empty list'}


def parse_pack_batch(body: JsonBody) -> PackBatchBody:
    """The shards of a pack batch within the limits, or a 400 naming every problem found
    (``parse_error`` when the body is not JSON).

    Reads ``body`` once: each member becomes a ``MemberDeclaration`` (or a problem) as its
    events pass. The limits refuse a batch at its first shard or member past them, before the
    rest of the body is read."""
    with json_parse_errors():
        declarations, problems = _BatchReader(json_events(body)).read()
    body.lone_surrogate_refusal()
    if problems:
        raise invalid("shards", problems)
    check_unique([m.path for d in declarations for m in d.members])  # each path was checked
    return PackBatchBody(declarations)


def _is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


class _BatchReader:
    """One pass over the events of a body that starts with "{"; as ``dict.get`` on
    ``json.loads``'s result would see it: a repeated key's last value wins, others are
    ignored."""

    def __init__(self, events: Iterator[Event]) -> None:
        self.events = events
        self.shard_limit: int = settings.DANDIZARR_BATCH_LIMIT
        self.member_limit: int = settings.DANDIZARR_PACK_MEMBER_LIMIT
        self.members_read = 0  # every member item, well-formed or not, against the limit

    def read(self) -> tuple[list[ShardDeclaration], list[Problem]]:
        events = self.events
        next(events)  # start_map
        result: tuple[list[ShardDeclaration], list[Problem]] = ([], [_no_shards()])
        for _, key in events:  # map_key, or the body's end_map
            if key is None:
                break
            event, _ = next(events)
            if key != "shards":
                skip_value(events, event)
            elif event == "start_array":
                self.members_read = 0
                result = self._shards()
            else:
                skip_value(events, event)
                result = [], [_no_shards()]
        for _ in events:  # nothing: yajl refuses what follows the body's end
            pass
        return result

    def _shards(self) -> tuple[list[ShardDeclaration], list[Problem]]:
        events = self.events
        declarations: list[ShardDeclaration] = []
        problems: list[Problem] = []
        index = -1
        for event, _ in events:
            if event == "end_array":
                break
            index += 1
            if index == self.shard_limit:
                raise ValidationFailed(
                    f"the batch has {index + 1} shards or more; "
                    f"at most {self.shard_limit} are allowed"
                )
            if event != "start_map":
                skip_value(events, event)
                problems.append({"path": f"shards[{index}]", "problem": "must be an object"})
                continue
            declaration = self._shard(index, problems)
            if declaration is not None:
                declarations.append(declaration)
        if index < 0:
            return [], [_no_shards()]
        names = Counter(d.name for d in declarations)
        problems += [
            {"path": n, "problem": "shard name appears more than once"}
            for n, c in names.items()
            if c > 1
        ]
        return declarations, problems

    def _shard(self, index: int, problems: list[Problem]) -> ShardDeclaration | None:
        """One shard object, after its start_map; its problems (in the order of the fields
        checked, whatever the order of its keys) go to ``problems``."""
        events = self.events
        fields: dict[str, Any] = {}
        members: list[MemberDeclaration] = []
        found: list[Problem | int] = []  # a member's problem, or the index of a non-object
        listed = 0  # the items of "members"
        for _, key in events:
            if key is None:  # end_map
                break
            event, value = next(events)
            if key == "members":
                members, found, listed = [], [], 0
                if event == "start_array":
                    members, found, listed = self._members()
                else:
                    skip_value(events, event)
            elif key in _SHARD_KEYS:
                fields[key] = value_of(events, event, value)
            else:
                skip_value(events, event)
        name = fields.get("name")
        label = name if isinstance(name, str) else f"shards[{index}]"
        size = _shard_problems(label, fields, problems)
        if not listed:
            problems.append({"path": label, "problem": '"members" must be a non-empty list'})
            return None
        problems += [
            {"path": f"{label} members[{p}]", "problem": "not an object"}
            if isinstance(p, int)
            else p
            for p in found
        ]
        records = (MemberRecord(m.path, m.offset, m.size, m.md5, m.slot) for m in members)
        for problem in member_problems(records, size):
            problems.append(
                {"path": problem["path"], "problem": f"in shard {label}: " + problem["problem"]}
            )
        if not isinstance(name, str):
            return None
        cps = fields.get("chunks_per_shard")
        return ShardDeclaration(name, str(fields.get("etag")), size, tuple(members), cps)

    def _members(self) -> tuple[list[MemberDeclaration], list[Problem | int], int]:
        """A shard's "members" list, after its start_array: the well-formed members, the
        problems of the others, and how many items it had."""
        events = self.events
        members: list[MemberDeclaration] = []
        found: list[Problem | int] = []
        left = self.member_limit - self.members_read
        index = -1
        for event, _ in events:
            if event == "end_array":
                break
            index += 1
            if index == left:
                raise ValidationFailed(
                    f"the batch declares {self.member_limit + 1} member files or more; "
                    f"at most {self.member_limit} are allowed"
                )
            if event != "start_map":
                skip_value(events, event)
                found.append(index)
                continue
            path = md5 = size = offset = slot = None
            for _, key in events:
                if key is None:  # end_map
                    break
                event, value = next(events)
                if event in OPENERS:
                    if key not in _MEMBER_KEYS:
                        skip_value(events, event)
                        continue
                    value = value_of(events, event, value)
                if key == "path":
                    path = value
                elif key == "md5":
                    md5 = value
                elif key == "offset":
                    offset = value
                elif key == "size":
                    size = value
                elif key == "slot":
                    slot = value
            member = _member(path, md5, size, offset, slot, found)
            if member is not None:
                members.append(member)
        self.members_read += index + 1
        return members, found, index + 1


def _shard_problems(label: str, fields: dict[str, Any], problems: list[Problem]) -> int:
    """The problems of a shard's own fields; its size (0 when it has none)."""
    problem = shard_name_problem(fields.get("name"))
    if problem:
        problems.append({"path": label, "problem": f"shard name {problem}"})
    md5_problem = etag_problem(fields.get("etag"))
    if md5_problem:
        problems.append({"path": label, "problem": f"etag {md5_problem}"})
    size = fields.get("size")
    if not _is_count(size):
        problems.append({"path": label, "problem": "size must be a non-negative integer"})
        size = 0
    cps = fields.get("chunks_per_shard")
    if cps is not None and not (
        isinstance(cps, list) and cps and all(type(c) is int and c > 0 for c in cps)
    ):
        problems.append(
            {"path": label, "problem": "chunks_per_shard must be a list of positive integers"}
        )
        fields["chunks_per_shard"] = None
    return size


def _member(
    path: object, md5: object, size: object, offset: object, slot: object, found: list[Any]
) -> MemberDeclaration | None:
    """A well-formed member, or None with its problem in ``found``."""
    problem = path_problem(path)
    if problem or not isinstance(path, str):
        found.append({"path": path, "problem": problem or "must be a string"})
        return None
    if slot is not None and not _is_count(slot):
        found.append({"path": path, "problem": "slot must be a non-negative integer"})
    if not _is_count(offset) or not _is_count(size):
        found.append({"path": path, "problem": "offset and size must be non-negative integers"})
        return None
    return MemberDeclaration(path, str(md5), size, offset, slot if _is_count(slot) else None)
