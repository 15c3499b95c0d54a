"""A writer process killed with SIGKILL mid-session (docs/writing.md): it writes into an
archive's ``image`` array through ``ArchiveStore``, flushes (its chunks in storage, staged),
says its session and is killed. Run against the tests' live service
(tests/client/test_store_writes.py) and the production shape
(tests/production/test_versions_model_live.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

WRITER = """
import sys, time
import numpy as np, zarr
from dandizarr.client.store import ArchiveStore

store = ArchiveStore(sys.argv[1], sys.argv[2], token=sys.argv[3], read_only=False)
zarr.open_array(store=store, path="image", mode="r+")[:32] = 5
store.flush()  # the store that began the session writes behind: its chunks in storage now
print(store.session_id, flush=True)
time.sleep(600)
"""


def killed_writer(url: str, zarr_id: str, token: str) -> str:
    """The session of a writer killed with SIGKILL after it staged its writes."""
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), url, zarr_id, token],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert writer.stdout is not None
        session_id = writer.stdout.readline().strip()
        assert session_id, "the writer failed before it wrote"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    return session_id
