#!/bin/sh
# `helm` for a fixed command line: runs the helm that get_helm.sh picks (Helm 4: $HELM, PATH or the
# pinned .cache/bin/helm), so pytest-helm's manifest_fixture can take a command at import time and
# helm is only looked up (or installed) when a fixture first renders. get_helm.sh installs a missing
# helm with $PYTHON's pip: the project's .venv python unless PYTHON is set.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
VENV_PYTHON="$HERE/../../.venv/bin/python"
if [ -z "${PYTHON:-}" ] && [ -x "$VENV_PYTHON" ]; then PYTHON=$VENV_PYTHON; export PYTHON; fi
exec "$(sh "$HERE/get_helm.sh" 4)" "$@"
