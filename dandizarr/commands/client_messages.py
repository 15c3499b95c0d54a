"""The client's errors as the command line tells them: the ones whose remedy is one of its
flags name the flag (the library names its own options, ``dandizarr.client.errors``); every
other error is told as the library words it."""

from __future__ import annotations

from dandizarr.client.errors import (
    ArchiveNotSharded,
    AuthenticationError,
    ClientError,
    OpenBatchLeft,
    TokenRequired,
)


def command_line_message(error: ClientError) -> str:
    if isinstance(error, OpenBatchLeft):
        return (
            f"zarr archive {error.zarr_id} has an upload batch open that this machine did not "
            "start (another upload is running, or one was interrupted elsewhere). Wait for it "
            "to finish, or rerun with --cancel-open-batch to cancel it (which deletes the files "
            "it uploaded)."
        )
    if isinstance(error, AuthenticationError):
        hint = (
            "check --token / DANDIZARR_TOKEN"
            if error.token_given
            else "give a token with --token or DANDIZARR_TOKEN"
        )
        return f"the server at {error.server} rejected the credentials ({error.detail}); {hint}"
    if isinstance(error, TokenRequired):
        return "uploading needs an API token: give --token or set DANDIZARR_TOKEN"
    if isinstance(error, ArchiveNotSharded):
        return (
            f"zarr archive {error.zarr_id} is {error.layout}: --pack needs a sharded archive "
            "(one created by an upload with --pack, or converted with POST pack/); upload "
            "without --pack, or into a new archive"
        )
    return str(error)
