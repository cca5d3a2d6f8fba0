#!/usr/bin/env bash
# `make test-images` and `make test-cluster`: make sure Docker runs, build the five images (an
# image whose inputs have not changed is not rebuilt, so the two targets build once), then run
#   images   tests/images: the whole pipeline with `docker run` only (the default);
#   cluster  tests/cluster: every release of tests/cluster/cluster_runs.py rendered with `helm
#            template` and run as a cluster runs it (charts/disttrain/README.md, "Running the
#            rendered release without a cluster"); needs root (fsGroup, iptables). It also builds
#            the SeaweedFS image of the runs that use an object store (docker/build-seaweedfs-image.sh).
#
#   docker/test-images.sh [images|cluster] [pytest args ...]
#
# Env: PYTHON (a python with pytest, and the docker package for cluster; default python3),
# DISTTRAIN_IMAGE_MODE (default local here: no registry or PyPI needed; online builds from
# python:3.11-slim and PyPI) and DISTTRAIN_IMAGE_TAG (see docker/build-images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
suite=images
case "${1:-}" in
    images|cluster) suite=$1; shift ;;
esac
start=$SECONDS
docker/ensure-docker.sh
DISTTRAIN_IMAGE_MODE=${DISTTRAIN_IMAGE_MODE:-local} docker/build-images.sh
echo "images ready after $((SECONDS - start))s"
if [ "$suite" = cluster ]; then
    # the object store of the runs that use one (tests/cluster/cluster_objectstore.py)
    PYTHON=${PYTHON:-python3} docker/build-seaweedfs-image.sh
    DISTTRAIN_TEST_CLUSTER=1 "${PYTHON:-python3}" -m pytest tests/cluster -v -rs "$@"
else
    DISTTRAIN_TEST_IMAGES=1 "${PYTHON:-python3}" -m pytest tests/images -v "$@"
fi
echo "test-$suite took $((SECONDS - start))s"
