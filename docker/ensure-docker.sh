#!/usr/bin/env bash
# Make `docker` usable on the host (used by `make test-images` and CI):
# installs Debian's docker.io and debootstrap when missing, and starts dockerd in the
# background when no daemon answers, then waits until `docker info` works.
#
# Env: DOCKERD_LOG (default /tmp/disttrain-dockerd.log), DOCKERD_WAIT seconds (default 90).
# The daemon is started with --bridge=none: the images are built with --network none and
# the containers run with --network none or host, so the default bridge is not needed (make
# test-cluster creates user-defined bridge networks of its own, which --bridge=none allows).
set -euo pipefail
LOG=${DOCKERD_LOG:-/tmp/disttrain-dockerd.log}
WAIT=${DOCKERD_WAIT:-90}

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "${missing[*]} missing, and installing needs root: run \`sudo apt-get install -y ${missing[*]}\` first" >&2; exit 1; }
    echo "installing ${missing[*]} ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "${missing[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    if [ -S /var/run/docker.sock ]; then
        echo "a docker daemon runs but $(id -un) may not use it: run \`sudo usermod -aG docker $(id -un)\` first, then log in again" >&2
    else
        echo "no docker daemon runs, and only root can start one: run \`sudo docker/ensure-docker.sh\` first" >&2
    fi
    exit 1
fi
echo "starting dockerd (log: $LOG) ..."
nohup dockerd --bridge=none >"$LOG" 2>&1 </dev/null &
for _ in $(seq "$WAIT"); do
    if docker info >/dev/null 2>&1; then
        echo "dockerd is up"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not come up within ${WAIT}s; its log:" >&2
tail -n 30 "$LOG" >&2
exit 1
