"""`dandizarr checksum`, in process and as the installed executable."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

from dandizarr.checksums import EMPTY_DIGEST
from dandizarr.cli import main
from tests.support.checksum_reference import reference_tree
from tests.support.processes import Processes

EXECUTABLE = Path(sys.executable).parent / "dandizarr"
FILES = {"a/b": b"hello", "a-b/c": b"", "z\u00e9": b"x" * 100}


def expected_digest(files: dict[str, bytes]) -> str:
    return reference_tree({p: (len(d), hashlib.md5(d).hexdigest()) for p, d in files.items()})[""][
        1
    ]


def make_tree(root: Path) -> Path:
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def listing_text(files: dict[str, bytes], order: list[str]) -> str:
    return "".join(f"{p}\t{len(files[p])}\t{hashlib.md5(files[p]).hexdigest()}\n" for p in order)


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checksum", str(make_tree(tmp_path)), "--jobs", "2"]) == 0
    assert capsys.readouterr().out == expected_digest(FILES) + "\n"


def test_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checksum", str(tmp_path)]) == 0
    assert capsys.readouterr().out == EMPTY_DIGEST + "\n"


@pytest.mark.parametrize("order", [sorted(FILES), sorted(FILES, reverse=True)])
def test_listing_file_in_any_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], order: list[str]
) -> None:
    listing = tmp_path / "listing.tsv"
    listing.write_text(listing_text(FILES, order), encoding="utf-8")
    assert main(["checksum", "--listing", str(listing), "-v"]) == 0
    assert capsys.readouterr().out == f"{expected_digest(FILES)}\n3 files, 105 bytes\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a\t1", "line 2: expected 'path<TAB>size<TAB>md5', got 2 field"),
        ("a\tx\t" + "0" * 32, "line 2: size is not a number"),
        ("a\t-1\t" + "0" * 32, "line 2: size is not a number"),
        ("a\t1\t" + "0" * 32 + "-3", "line 2: not an md5.*multipart"),
        ("a\t1\t" + "A" * 32, "line 2: not an md5"),
        ("/a\t1\t" + "0" * 32, "relative"),
        ("b/x\t1\t" + "0" * 32, "duplicate"),
        ("b\t1\t" + "0" * 32, "both a file and a directory"),
    ],
)
def test_bad_listing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    listing = tmp_path / "listing.tsv"
    listing.write_text(f"b/x\t1\t{'0' * 32}\n{line}\n", encoding="utf-8")
    assert main(["checksum", "--listing", str(listing)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("dandizarr: ")
    assert re.search(message, captured.err), captured.err


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_bytes(b"")
    assert main(["checksum", str(tmp_path / "missing")]) == 1
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["checksum", str(tmp_path / "f")]) == 1
    assert "not a directory" in capsys.readouterr().err
    assert main(["checksum", "--listing", str(tmp_path / "missing")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["checksum", str(tmp_path), "--jobs", "0"]) == 1
    with pytest.raises(SystemExit):  # argparse: a path and --listing are exclusive
        main(["checksum", str(tmp_path), "--listing", "-"])


def test_executable_directory_and_stdin(processes: Processes, tmp_path: Path) -> None:
    make_tree(tmp_path)
    result = processes.run(
        [EXECUTABLE, "checksum", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (0, expected_digest(FILES) + "\n")
    result = processes.run(
        [EXECUTABLE, "checksum", "--listing", "-"],
        input=listing_text(FILES, sorted(FILES, reverse=True)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, expected_digest(FILES) + "\n")


def test_executable_error_exit(processes: Processes, tmp_path: Path) -> None:
    result = processes.run(
        [EXECUTABLE, "checksum", "--listing", "-"],
        input="ok\t1\t" + "0" * 32 + "\nbad line\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "dandizarr: line 2: expected 'path<TAB>size<TAB>md5', got 1 field(s)"
    )


def test_listing_file_that_returns_to_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "a" is left for "b" and then re-entered: streaming fails, the file is re-read and sorted.
    files = {"a/x": b"1", "b/y": b"2", "a/z": b"3"}
    listing = tmp_path / "listing.tsv"
    listing.write_text(listing_text(files, ["a/x", "b/y", "a/z"]), encoding="utf-8")
    assert main(["checksum", "--listing", str(listing)]) == 0
    assert capsys.readouterr().out == expected_digest(files) + "\n"
