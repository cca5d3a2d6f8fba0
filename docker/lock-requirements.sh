#!/usr/bin/env bash
# Regenerate docker/requirements/<component>.txt: the full, exactly pinned dependency set of
# each image (transitive dependencies included), resolved for Linux x86_64 / CPython 3.11.
#
#   docker/lock-requirements.sh [component ...]     # default: copier trainer sweep aggregator server
#
# The direct dependencies are the component's pyproject.toml `dependencies` with the pins of
# the root requirements.txt (docker/locks.py); every other package that requirements.txt pins is held
# to its pin too (-c), so that the images agree with each other and with the development venv (attrs:
# dp-accounting, in the trainer, takes only versions below 24). Run it after changing requirements.txt or a
# component's dependencies; tests/images/test_image_sources.py fails while a lock disagrees.
# Then docker/requirements/runtime.txt: the lines every TensorFlow image's lock shares (docker/locks.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(copier trainer sweep aggregator server)
# Wheels that run on glibc 2.36 (Debian bookworm, the base images' libc) on x86_64.
platforms=(--platform linux_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64)
for i in $(seq 5 36); do platforms+=(--platform "manylinux_2_${i}_x86_64"); done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for c in "${components[@]}"; do
    "$PY" docker/locks.py direct "$c" > "$tmp/$c.in"
    echo "resolving $c ..." >&2
    "$PY" -m pip install -qq --dry-run --ignore-installed --only-binary=:all: "${platforms[@]}" \
        --python-version 3.11 --implementation cp --abi cp311 --target "$tmp/t" \
        --report "$tmp/$c.json" -r "$tmp/$c.in" -c requirements.txt >&2
    "$PY" docker/locks.py write "$c" "$tmp/$c.json"
    echo "  docker/requirements/$c.txt: $(grep -vc '^#' "docker/requirements/$c.txt") packages" >&2
done
"$PY" docker/locks.py runtime
echo "  docker/requirements/runtime.txt: $(grep -vc '^#' docker/requirements/runtime.txt) packages shared by the TensorFlow images" >&2
