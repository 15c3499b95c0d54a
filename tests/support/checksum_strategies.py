"""Hypothesis strategies for archive paths and file states."""

from __future__ import annotations

from hypothesis import strategies as st

# Few names, so that random paths share directories and collide; chosen to exercise
# code-point order ("a" < "a-b" < "a.b" < "a_b", "B" < "a", "Z" < "_"), escaping (quote,
# backslash, control, non-ASCII, non-BMP) and the sorted-path vs per-name order difference.
NAMES = ["a", "a-b", "a.b", "a_b", "B", "Z", "_", 'q"', "b\\", "t\t", "é", "\U0001f600", "0", "10"]

names = st.sampled_from(NAMES)
paths = st.lists(names, min_size=1, max_size=4).map("/".join)
md5s = st.binary(min_size=16, max_size=16).map(bytes.hex)
sizes = st.integers(min_value=0, max_value=2**40)


def consistent(files: dict[str, object]) -> bool:
    """No path is also a directory of another path."""
    directories = {path.rsplit("/", 1)[0] for path in files if "/" in path}
    expanded = set()
    for directory in directories:
        parts = directory.split("/")
        expanded.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return expanded.isdisjoint(files)


file_sets = st.dictionaries(paths, st.tuples(sizes, md5s), max_size=40).filter(consistent)


# A valid md5 for entries whose digest does not matter.
MD5 = "0123456789abcdef0123456789abcdef"


def entries_of(files: dict[str, tuple[int, str]]) -> list[tuple[str, int, str]]:
    """``file_sets``' ``{path: (size, md5)}`` as compute_tree's ``(path, size, md5)`` entries."""
    return [(path, size, md5) for path, (size, md5) in files.items()]
