#!/bin/sh
# `helm` for a fixed command line: runs the helm that get_helm.sh picks (Helm 4: $HELM, PATH or the
# pinned .cache/bin/helm), so pytest-helm's manifest_fixture can take a command at import time and
# helm is only looked up (or installed) when a fixture first renders.
set -eu
exec "$(sh "$(dirname "$0")/get_helm.sh" 4)" "$@"
