"""The docs site builds: `mkdocs build --strict` with the pinned MkDocs of .venv-docs (requirements-docs.txt).

Strict mode fails on every warning: a link to a page or an anchor that does not exist, a link out of
docs/, a page that is in docs/ but not in the nav, a nav entry without its page. The docs venv is
built through the Makefile's own target (`make docs-venv`), so the test checks what `make docs` uses.
It is skipped only when the package index cannot be reached (the venv cannot be built offline).
"""

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS_BIN = ROOT / ".venv-docs" / "bin"


def index_reachable():
    """True when pip could reach its package index (PIP_INDEX_URL, else PyPI)."""
    url = urllib.parse.urlparse(os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple"))
    if url.scheme == "file":
        return True
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=10).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def mkdocs():
    installed = DOCS_BIN / ".installed"
    reqs = ROOT / "requirements-docs.txt"
    if not installed.exists() or installed.stat().st_mtime < reqs.stat().st_mtime:
        make = shutil.which("make")
        if make is None:
            pytest.skip("make is not installed")
        done = subprocess.run([make, "docs-venv", f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            if not index_reachable():
                pytest.skip("the package index is unreachable: cannot build .venv-docs (make docs-venv)")
            pytest.fail(f"make docs-venv failed:\n{done.stdout}\n{done.stderr}")
    return DOCS_BIN / "mkdocs"


def test_mkdocs_build_strict(mkdocs, tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in (
        "index.html",
        "getting-started/index.html",
        "strategies/index.html",
        "serving/index.html",
        "reference/values/index.html",
        "reference/cli/index.html",
        "benchmarks/results/index.html",
        "assets/bench/scaling.png",
    ):
        assert (tmp_path / "site" / page).exists(), page


def test_docs_venv_is_pinned():
    """Every line of requirements-docs.txt is an exact pin, so the docs build does not drift."""
    pins = [
        line for line in (ROOT / "requirements-docs.txt").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert pins and all("==" in line for line in pins), pins
    names = {line.split("==")[0].lower() for line in pins}
    assert {"mkdocs", "mkdocs-material", "pymdown-extensions", "markdown", "pyyaml"} <= names
