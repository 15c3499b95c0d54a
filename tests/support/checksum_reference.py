"""A deliberately naive tree hash (dicts + json.dumps), the oracle for the fast implementation."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def reference_tree(files: dict[str, tuple[int, str]]) -> dict[str, tuple[bytes, str, int, int]]:
    """{directory: (.checksum bytes, digest, count, size)} for every directory, root = ""."""
    children: dict[str, dict[str, Any]] = {"": {}}
    for path, (size, md5) in files.items():
        parts = path.split("/")
        node = children[""]
        for index, part in enumerate(parts[:-1]):
            directory = "/".join(parts[: index + 1])
            children.setdefault(directory, {})
            node[part] = ("dir", directory)
            node = children[directory]
        node[parts[-1]] = ("file", size, md5)

    result: dict[str, tuple[bytes, str, int, int]] = {}

    def visit(directory: str) -> tuple[str, int, int]:
        dirs, files_ = [], []
        count = size = 0
        for name in sorted(children[directory]):
            item = children[directory][name]
            if item[0] == "dir":
                digest, sub_count, sub_size = visit(item[1])
                dirs.append({"digest": digest, "name": name, "size": sub_size})
                count, size = count + sub_count, size + sub_size
            else:
                files_.append({"digest": item[2], "name": name, "size": item[1]})
                count, size = count + 1, size + item[1]
        checksums = {"directories": dirs, "files": files_}
        text = json.dumps(checksums, separators=(",", ":"))
        digest = f"{hashlib.md5(text.encode()).hexdigest()}-{count}--{size}"
        document = json.dumps({"checksums": checksums, "digest": digest}, separators=(",", ":"))
        result[directory] = (document.encode(), digest, count, size)
        return digest, count, size

    visit("")
    return result
