#!/usr/bin/env bash
# `make test-images`: make sure Docker runs, build the four images, then run
# tests/images (the whole pipeline with `docker run` only).
#
# Env: PYTHON (a python with pytest; default python3), DISTTRAIN_IMAGE_MODE (default local here:
# no registry or PyPI needed; online builds from python:3.11-slim and PyPI) and
# DISTTRAIN_IMAGE_TAG (see docker/build-images.sh); extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
docker/ensure-docker.sh
DISTTRAIN_IMAGE_MODE=${DISTTRAIN_IMAGE_MODE:-local} docker/build-images.sh
echo "images ready after $((SECONDS - start))s"
DISTTRAIN_TEST_IMAGES=1 "${PYTHON:-python3}" -m pytest tests/images -v "$@"
echo "test-images took $((SECONDS - start))s"
