#!/usr/bin/env bash
# Build the disttrain images (`make images`): disttrain-<component>:<tag> for each component.
#
#   docker/build-images.sh [component ...]        # default: copier trainer sweep aggregator server
#
# Env:
#   DISTTRAIN_IMAGE_TAG   tag of the images (default latest)
#   DISTTRAIN_IMAGE_MODE  online | local | auto (default auto)
#     online: plain `docker build` of components/<name>/Dockerfile (base python:3.11-slim from
#             the registry, dependencies from PyPI inside the build): what a user does.
#     local:  no registry, no PyPI inside the build: the base image is made with debootstrap
#             (docker/make-base-image.sh), the wheels are downloaded on the host into
#             docker/wheels (docker/download-wheels.sh) and installed with --no-index.
#     auto:   online if python:3.11-slim is present or can be pulled, else local.
#   DISTTRAIN_BASE_IMAGE  base image of the local mode (default disttrain-base:bookworm)
# Logs go to build/logs/<component>.log. Both modes use the same Dockerfiles.
#
# The base image goes to the Dockerfiles by digest (their BASE_IMAGE build argument), so a tag
# moved on the registry or a re-imported base cannot slip in unnoticed:
#   online: python@sha256:<manifest digest> of the python:3.11-slim present or just pulled;
#   local:  the imported base has no registry digest (docker import gives it none); its image
#           id sha256:<id> (the hash of its config, which names its layers' content) is passed
#           instead. Only Docker's classic builder resolves `FROM sha256:<id>` (BuildKit looks it up
#           as docker.io/library/sha256, moby/buildkit#2204), so the local mode builds with
#           DOCKER_BUILDKIT=0 (Debian's docker.io, which make test-images installs, has no BuildKit).
# DISTTRAIN_BASE_IMAGE may itself be a digest reference (name@sha256:... or sha256:...).
#
# Disk: the classic builder keeps every stage of a multi-stage build as an untagged image. Ours
# hold the wheels (~0.5 GB) and a second copy of the dependencies (~1.3 GB with TensorFlow), so
# five images left ~14 GB behind where the images themselves take ~6 GB; a CI machine ran out of
# space in the middle of `make test-images`. The stages carry the label disttrain.build-stage and
# are removed once the last image is built (only those: other untagged images are left alone), and
# so is the image a rebuild replaces, unless a container uses it. Not before the last image: the
# four TensorFlow images open with the same runtime stage (docker/requirements/runtime.txt), which
# the first of them builds and the others take from the cache, with their first layers shared.
# DISTTRAIN_KEEP_BUILD_STAGES=1 keeps them as a layer cache, so that a change to a component's
# code rebuilds only its code layer instead of reinstalling its dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${DISTTRAIN_IMAGE_TAG:-latest}
MODE=${DISTTRAIN_IMAGE_MODE:-auto}
ONLINE_BASE=python:3.11-slim
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(copier trainer sweep aggregator server)

if [ "$MODE" = auto ]; then
    if docker image inspect "$ONLINE_BASE" >/dev/null 2>&1 || timeout 60 docker pull -q "$ONLINE_BASE" >/dev/null 2>&1; then
        MODE=online
    else
        MODE=local
    fi
fi

# The base image by digest: a registry digest if the image has one, else its image id.
base_by_digest() {
    local image=$1 digest
    case "$image" in *@sha256:*|sha256:*) echo "$image"; return ;; esac
    digest=$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$image" | head -n 1)
    if [ -n "$digest" ]; then echo "$digest"; else docker image inspect -f '{{.Id}}' "$image"; fi
}

build_args=()
case "$MODE" in
    online)
        base=$(base_by_digest "$ONLINE_BASE")
        build_args=(--build-arg "BASE_IMAGE=$base")
        ;;
    local)
        export DISTTRAIN_BASE_IMAGE=${DISTTRAIN_BASE_IMAGE:-disttrain-base:bookworm}
        docker/make-base-image.sh
        docker/download-wheels.sh
        base=$(base_by_digest "$DISTTRAIN_BASE_IMAGE")
        case "$base" in sha256:*) export DOCKER_BUILDKIT=0 ;; esac  # FROM <image id>: classic builder only
        # --network none: the local build needs no network at all.
        build_args=(--network none --build-arg "BASE_IMAGE=$base"
                    --build-arg "PIP_INSTALL_ARGS=--no-index --find-links /tmp/wheels")
        ;;
    *) echo "DISTTRAIN_IMAGE_MODE must be online, local or auto, not '$MODE'" >&2; exit 2 ;;
esac

# A digest of everything an image is built from (its Dockerfile, lock, sources, the base image
# and build arguments): an image already labelled with it is not rebuilt, which saves sending
# the build context (with docker/wheels, ~0.5 GB) to the daemon again. DISTTRAIN_FORCE_BUILD=1 rebuilds.
inputs_digest() {
    local c=$1 base sources
    base=$(docker image inspect -f '{{.Id}}' "${DISTTRAIN_BASE_IMAGE:-python:3.11-slim}" 2>/dev/null || echo pull)
    # every components/<x> folder the Dockerfile copies (the sweep image holds the trainer too): a change
    # in any of them must rebuild the image
    mapfile -t sources < <(grep -oE '^COPY +components/[A-Za-z0-9_-]+' "components/$c/Dockerfile" | awk '{print $2}' | sort -u)
    # and every lock it copies (the TensorFlow images: the runtime's too)
    mapfile -t locks < <(grep -oE '^COPY +docker/requirements/[A-Za-z0-9_-]+\.txt' "components/$c/Dockerfile" | awk '{print $2}' | sort -u)
    {
        echo "$MODE $base ${build_args[*]}"
        find .dockerignore requirements.txt docker/server-healthcheck.py "${locks[@]}" \
             components/contract "components/$c" "${sources[@]}" -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' \
             ! -path '*/build/*' ! -path '*/tests/*' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-32
}

# The build stages go once the last image is built, or the build has failed (see Disk above).
remove_build_stages() {
    [ "${DISTTRAIN_KEEP_BUILD_STAGES:-0}" = 1 ] || docker image prune --force --filter label=disttrain.build-stage=true >/dev/null || true
}
trap remove_build_stages EXIT

mkdir -p build/logs
for c in "${components[@]}"; do
    [ -f "components/$c/Dockerfile" ] || { echo "no components/$c/Dockerfile" >&2; exit 2; }
    start=$SECONDS
    digest=$(inputs_digest "$c")
    if [ "${DISTTRAIN_FORCE_BUILD:-0}" != 1 ] && \
       [ "$(docker image inspect -f '{{index .Config.Labels "disttrain.inputs"}}' "disttrain-$c:$TAG" 2>/dev/null)" = "$digest" ]; then
        echo "disttrain-$c:$TAG is up to date"
        continue
    fi
    replaced=$(docker image inspect -f '{{.Id}}' "disttrain-$c:$TAG" 2>/dev/null || true)
    printf 'building disttrain-%s:%s (%s, base %s) ... ' "$c" "$TAG" "$MODE" "$base"
    if ! docker build --force-rm "${build_args[@]}" --label "disttrain.inputs=$digest" -f "components/$c/Dockerfile" -t "disttrain-$c:$TAG" . > "build/logs/$c.log" 2>&1; then
        echo "FAILED"; tail -n 40 "build/logs/$c.log" >&2
        echo "(full log: build/logs/$c.log)" >&2
        exit 1
    fi
    echo "done in $((SECONDS - start))s"
    # The image the tag pointed to before; kept if a container still uses it (rm refuses).
    if [ -n "$replaced" ] && [ "$replaced" != "$(docker image inspect -f '{{.Id}}' "disttrain-$c:$TAG")" ]; then
        docker image rm "$replaced" >/dev/null 2>&1 || true
    fi
done
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E "^disttrain-($(IFS='|'; echo "${components[*]}")):$TAG\b" || true
