#!/usr/bin/env bash
# `make test-cluster`: make sure Docker runs, build the four images (an image whose inputs have
# not changed since `make test-images` is not rebuilt), then run tests/cluster: every release of
# tests/cluster/cluster_runs.py rendered with `helm template` and run with the real images as a
# cluster runs it (see charts/disttrain/README.md, "Running the release without a cluster").
#
# Env: PYTHON (a python with pytest and the docker package; default python3), DISTTRAIN_IMAGE_MODE
# and DISTTRAIN_IMAGE_TAG as for test-images.sh; extra arguments go to pytest. Needs root (the
# claim directory gets the pods' fsGroup; the NetworkPolicy becomes iptables rules).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
docker/ensure-docker.sh
DISTTRAIN_IMAGE_MODE=${DISTTRAIN_IMAGE_MODE:-local} docker/build-images.sh
echo "images ready after $((SECONDS - start))s"
DISTTRAIN_TEST_CLUSTER=1 "${PYTHON:-python3}" -m pytest tests/cluster -v -rs "$@"
echo "test-cluster took $((SECONDS - start))s"
