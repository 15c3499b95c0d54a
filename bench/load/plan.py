"""What the driver (``bench.load.run``) hands the Locust process, as one JSON file, and the route
classes every request is counted under (Locust's stats are per name: one name per class)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class UploaderPlan:
    """One uploader: whose token, which dandiset, the archive's name, its local source."""

    token: str
    dandiset: str
    name: str
    root: str
    pack: bool


@dataclass
class ReadTarget:
    """An archive or version a reader reads: its id, ``draft`` or ``version``, some chunk paths
    (4 KiB each) and the array's path."""

    zarr_id: str
    kind: str
    paths: list[str]


@dataclass
class Plan:
    url: str
    uploaders: list[UploaderPlan]
    targets: list[ReadTarget]
    # Each reader's requests per second (Locust's constant_throughput); 0: as fast as answered.
    reader_rate: float
    # Where the uploaders record each upload's result (JSON lines), for the driver's checks.
    results: str
    seed: int
    # Files each upload adds to its archive, and files it overwrites.
    add_files: int = 64
    overwrite_files: int = 4
    extra: dict[str, str] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> Plan:
        data = json.loads(path.read_text())
        data["uploaders"] = [UploaderPlan(**u) for u in data["uploaders"]]
        data["targets"] = [ReadTarget(**t) for t in data["targets"]]
        return cls(**data)


# A zarr_id, a version's id: UUIDs; a dandiset's identifier, a batch's: digits.
_ID = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+)$")


def route_class(method: str, path: str) -> str:
    """The route class of a request the client library makes: its method and its path with
    ids as ``{id}`` and anything below an archive's ``files/`` as one class."""
    path = path.split("?", 1)[0]
    parts = ["{id}" if _ID.match(p) else p for p in path.split("/")]
    shape = "/".join(parts)
    for marker in ("/files/", "/tree/"):
        head, found, _ = shape.partition(marker)
        if found:
            shape = head + marker + "..."
    return f"{method} {shape}"
