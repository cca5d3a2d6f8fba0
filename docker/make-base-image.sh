#!/usr/bin/env bash
# Build the local base image (Debian bookworm + its python3, i.e. Python 3.11) with
# debootstrap + `docker import`, for machines where no image registry is reachable.
#
#   docker/make-base-image.sh            # -> image disttrain-base:bookworm (cached)
#
# Env: DISTTRAIN_BASE_IMAGE (tag, default disttrain-base:bookworm), DEBIAN_MIRROR
# (default: the first deb.debian.org-style URI apt uses here, else http://deb.debian.org/debian),
# DISTTRAIN_DOCKER_CACHE (default .cache/docker). The root filesystem tarball is kept in the
# cache, so a fresh dockerd only needs `docker import` (seconds), not a new debootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${DISTTRAIN_BASE_IMAGE:-disttrain-base:bookworm}
CACHE=${DISTTRAIN_DOCKER_CACHE:-.cache/docker}
TARBALL=$CACHE/base-bookworm.tar.gz
# Bump when the package list or clean-up below changes, so the cached tarball is rebuilt.
RECIPE=4
STAMP=$CACHE/base-bookworm.recipe

if docker image inspect "$TAG" >/dev/null 2>&1 && [ "$(docker image inspect -f '{{index .Config.Labels "disttrain.base.recipe"}}' "$TAG")" = "$RECIPE" ]; then
    echo "base image $TAG is up to date"
    exit 0
fi

if [ ! -s "$TARBALL" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$RECIPE" ]; then
    command -v debootstrap >/dev/null || { echo "debootstrap is missing: run \`sudo apt-get install -y debootstrap\` first" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }
    mirror=${DEBIAN_MIRROR:-}
    if [ -z "$mirror" ]; then
        mirror=$(grep -hoE '^(URIs:|deb) *[^ ]*https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
                 | grep -oE 'https?://[^ ]+' | head -n1 || true)
        mirror=${mirror:-http://deb.debian.org/debian}
    fi
    mkdir -p "$CACHE"
    root=$(mktemp -d "${TMPDIR:-/tmp}/disttrain-rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    echo "debootstrap bookworm from $mirror into $root (a few minutes) ..."
    # minbase = Essential + apt; python3.11-venv brings ensurepip (pip, setuptools) for `python3 -m venv`.
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" \
        > "$CACHE/debootstrap.log" 2>&1 || { tail -n 30 "$CACHE/debootstrap.log" >&2; exit 1; }
    # nginx-light, the server image's front (its local build, like every one, has no network), installed
    # in the chroot with its services kept from starting (policy-rc.d 101: nginx would bind port 80 here).
    printf '#!/bin/sh\nexit 101\n' > "$root"/usr/sbin/policy-rc.d && chmod +x "$root"/usr/sbin/policy-rc.d
    { chroot "$root" apt-get install -y -q --no-install-recommends nginx-light && rm -f "$root"/etc/nginx/sites-enabled/default; } \
        >> "$CACHE/debootstrap.log" 2>&1 || { tail -n 30 "$CACHE/debootstrap.log" >&2; exit 1; }
    rm -f "$root"/usr/sbin/policy-rc.d
    # Clean: package caches and lists, docs, man pages, locales, logs.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
           "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
           "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
           "$root"/usr/share/locale/* "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
    find "$root"/usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
    # The image's apt should use the public mirror, whatever this host uses.
    echo "deb http://deb.debian.org/debian bookworm main" > "$root"/etc/apt/sources.list
    tar --numeric-owner -C "$root" -czf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    echo "$RECIPE" > "$STAMP"
    rm -rf "$root"
    trap - EXIT
fi

echo "importing $TARBALL as $TAG"
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL disttrain.base.recipe=$RECIPE" \
    --change 'CMD ["/bin/bash"]' \
    "$TARBALL" "$TAG" >/dev/null
docker image ls "$TAG"
