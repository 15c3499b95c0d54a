"""What an upload says when it ends (local or remote: the same summary and exit status)."""

from __future__ import annotations

import argparse
import json
import sys

from dandizarr.client.results import UploadResult


def report(args: argparse.Namespace, result: UploadResult) -> int:
    """Print the summary (and what went wrong); the exit status."""
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.summary())
    if result.changed_files:
        shown = ", ".join(result.changed_files[:5])
        more = f" and {len(result.changed_files) - 5} more" if len(result.changed_files) > 5 else ""
        print(
            f"dandizarr: {len(result.changed_files)} files changed on disk during the upload and "
            f"were not uploaded: {shown}{more}; run the upload again to send their new content",
            file=sys.stderr,
        )
    elif result.server_checksum != result.expected_checksum:
        print(
            f"dandizarr: checksum mismatch: the server holds {result.server_checksum}, the "
            f"local files give {result.expected_checksum}",
            file=sys.stderr,
        )
    return 0 if result.ok else 1
