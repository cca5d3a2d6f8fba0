#!/bin/sh
# Print the path of a checkov binary, installing the pinned one (requirements-checkov.txt) into
# its own venv .cache/checkov-venv if needed. checkov has its own venv because its dependencies
# would downgrade pins of .venv (see requirements-checkov.txt).
#
#   sh tests/chart/get_checkov.sh     # $CHECKOV if set, else .cache/checkov-venv/bin/checkov
#
# Idempotent: the install happens once (again when requirements-checkov.txt changes); stdout is the path only.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.cache/checkov-venv"
REQ="$ROOT/requirements-checkov.txt"
PYTHON=${PYTHON:-python3}

if [ -n "${CHECKOV:-}" ] && [ -x "${CHECKOV}" ]; then echo "$CHECKOV"; exit 0; fi
if [ -x "$VENV/bin/checkov" ] && [ "$VENV/.installed" -nt "$REQ" ]; then
    echo "$VENV/bin/checkov"; exit 0
fi
echo "installing $(grep -v '^#' "$REQ" | tr '\n' ' ')into $VENV ..." >&2
"$PYTHON" -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
touch "$VENV/.installed"
echo "$VENV/bin/checkov"
