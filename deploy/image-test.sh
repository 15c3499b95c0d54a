#!/usr/bin/env bash
# make image-test: build the service's image from the Dockerfile and run it for real
# (tests/dandizarr/test_image_live.py: migrate, the admin, the bucket, gunicorn and a Celery
# worker from the image against this machine's PostgreSQL, Redis and a SeaweedFS, then
# /readyz, the pages and an upload), and print its size.
#
# No registry is reachable from the development machines, so the base is Debian bookworm made
# by debootstrap (python3, python3-venv, python-is-python3) and imported into Docker once
# (kept as dandizarr-base:bookworm); IMAGE_BASE=python:3.11.11-slim-bookworm uses the
# Dockerfile's own base where Docker Hub answers. Without a Docker engine that answers, it
# says why and skips (exit 0). IMAGE_TEST_BUILD_ONLY=1 stops after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-dandizarr:image-test}
IMAGE_BASE=${IMAGE_BASE:-dandizarr-base:bookworm}

if ! command -v docker >/dev/null; then
    echo "make image-test: skipped: no docker command (apt-get install docker.io)"
    exit 0
fi
if ! error=$(docker info 2>&1 >/dev/null); then
    echo "make image-test: skipped: no Docker engine answers (start dockerd): ${error##*$'\n'}"
    exit 0
fi

if [ "$IMAGE_BASE" = "dandizarr-base:bookworm" ] && ! docker image inspect "$IMAGE_BASE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "make image-test: needs debootstrap (apt-get install debootstrap)"; exit 1; }
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    echo "--- a Debian bookworm base with debootstrap (once; kept as $IMAGE_BASE)"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*  # as slim bases do
    # The certificates this machine trusts (its network may intercept TLS with its own CA), for
    # the image build's pip, which reads its own bundle unless told.
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$rootfs/etc/pip.conf"
    tar -C "$rootfs" -c . | docker import - "$IMAGE_BASE" >/dev/null
fi

echo "--- docker build (base $IMAGE_BASE)"
# The host's network: pip reaches PyPI as this machine does.
docker build --network host --build-arg "BASE=$IMAGE_BASE" -t "$IMAGE" . >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "image $IMAGE: $((size / 1000000)) MB"

if [ "${IMAGE_TEST_BUILD_ONLY:-0}" = "1" ]; then
    exit 0  # .ci/run builds while the suite runs, then runs this again: the build is cached
fi

echo "--- the image, run (tests/dandizarr/test_image_live.py)"
DANDIZARR_TEST_IMAGE="$IMAGE" make test ARGS="tests/dandizarr/test_image_live.py -p no:randomly"
