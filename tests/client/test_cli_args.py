"""Argument parsing of upload, download and ls (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dandizarr.cli import build_parser, main


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(list(argv))


def test_upload_defaults_and_flags(tmp_path: Path) -> None:
    args = parse("upload", str(tmp_path), "--dandiset", "000001")
    assert (args.dandiset, args.name, args.zarr_id, args.sync) == ("000001", None, None, False)
    assert args.jobs == 32 and not args.json and not args.cancel_open_batch
    args = parse(
        "upload", str(tmp_path), "--zarr-id", "u", "-j", "4", "--sync", "--json",
        "--cancel-open-batch", "--server", "http://x", "--token", "t",
    )  # fmt: skip
    assert (args.zarr_id, args.jobs, args.sync, args.json) == ("u", 4, True, True)
    assert (args.server, args.token, args.cancel_open_batch) == ("http://x", "t", True)


def test_name_and_zarr_id_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("upload", str(tmp_path), "--name", "a", "--zarr-id", "b")
    assert exit_info.value.code == 2


@pytest.mark.parametrize("jobs", ["0", "-3", "many"])
def test_jobs_must_be_a_positive_integer(tmp_path: Path, jobs: str) -> None:
    with pytest.raises(SystemExit):
        parse("upload", str(tmp_path), "--dandiset", "1", "--jobs", jobs)


def test_upload_needs_a_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upload", str(tmp_path)]) == 1
    assert "give --dandiset" in capsys.readouterr().err


def test_upload_needs_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upload", str(tmp_path / "absent"), "--dandiset", "000001"]) == 1
    assert "is not a directory" in capsys.readouterr().err


def test_download_and_ls_arguments() -> None:
    args = parse("download", "zid", "out", "--path", "a/b", "-j", "3")
    assert (args.zarr_id, args.dest, args.path, args.jobs) == ("zid", "out", "a/b", 3)
    args = parse("ls", "zid")
    assert (args.zarr_id, args.path, args.recursive) == ("zid", "", False)
    args = parse("ls", "zid", "0/1", "-r", "--json")
    assert (args.path, args.recursive, args.json) == ("0/1", True, True)


def test_server_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from dandizarr.commands.connection import make_client

    monkeypatch.setenv("DANDIZARR_URL", "http://env.example:1234/")
    monkeypatch.setenv("DANDIZARR_TOKEN", "env-token")
    client = make_client(parse("ls", "zid"))
    assert (client.server, client.token) == ("http://env.example:1234", "env-token")
    client = make_client(parse("ls", "zid", "--server", "http://flag", "--token", "flag"))
    assert (client.server, client.token) == ("http://flag", "flag")


def test_upload_pack_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("upload", str(tmp_path), "--dandiset", "000001")
    assert (args.pack, args.shard_size) == (False, None)
    args = parse("upload", str(tmp_path), "--dandiset", "000001", "--pack", "--shard-size", "8M")
    assert (args.pack, args.shard_size) == (True, 8 << 20)
    assert main(["upload", str(tmp_path), "--dandiset", "000001", "--shard-size", "8M"]) == 1
    assert "--shard-size needs --pack" in capsys.readouterr().err


def test_the_cli_default_jobs_is_the_clients() -> None:
    """The parser's --jobs default repeats the client's (it must not import the client)."""
    from dandizarr.client import api_connection
    from dandizarr.commands import connection

    assert connection.DEFAULT_JOBS == api_connection.DEFAULT_JOBS


def test_a_dry_run_of_a_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # A remote tree is not hashed here: refused before any connection (no server runs), not
    # uploaded for real.
    status = main(["upload", "s3://bucket/x.zarr", "--zarr-id", "u", "--dry-run"])
    assert status != 0 and "--dry-run is for a local directory" in capsys.readouterr().err
