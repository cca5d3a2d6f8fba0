#!/usr/bin/env bash
# Tag and push the built images (`make push REGISTRY=...`):
#
#   REGISTRY=registry.example.com/team docker/push-images.sh [component ...]
#
# pushes $REGISTRY/disttrain-<component>:<tag> for each component (default all four);
# the tag is DISTTRAIN_IMAGE_TAG (default latest). Build first with docker/build-images.sh.
set -euo pipefail
REGISTRY=${REGISTRY:-${1:-}}
[ -n "${REGISTRY:-}" ] || { echo "usage: REGISTRY=host[:port]/path $0 [component ...]" >&2; exit 2; }
[ "${1:-}" != "$REGISTRY" ] || shift
REGISTRY=${REGISTRY%/}
TAG=${DISTTRAIN_IMAGE_TAG:-latest}
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(copier trainer sweep aggregator server)
for c in "${components[@]}"; do
    docker image inspect "disttrain-$c:$TAG" >/dev/null 2>&1 || { echo "disttrain-$c:$TAG is not built (make images)" >&2; exit 1; }
done
for c in "${components[@]}"; do
    docker tag "disttrain-$c:$TAG" "$REGISTRY/disttrain-$c:$TAG"
    docker push "$REGISTRY/disttrain-$c:$TAG"
done
# The values that pin each image by the digest just pushed (each image has its own digest).
echo "# values to pin the images by digest:"
echo "image: {registry: $REGISTRY}"
for c in "${components[@]}"; do
    digest=$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$REGISTRY/disttrain-$c:$TAG" | grep "^$REGISTRY/disttrain-$c@" | head -n 1)
    echo "$c: {image: {tag: \"$TAG@${digest#*@}\"}}"
done
