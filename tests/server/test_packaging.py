"""The server's package ships the web demo's files, and building it prints no setuptools
warning (a newcomer's `make demo` installs it; the warning read like an error)."""

import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(ROOT, "components", "server")


def test_the_wheel_holds_the_web_demo_and_building_it_warns_of_nothing(tmp_path):
    # --no-build-isolation: the venv's own setuptools, no index needed
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--verbose", "--no-deps", "--no-build-isolation",
                             "--wheel-dir", str(tmp_path), SERVER], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "would be ignored" not in output, output
    assert "SetuptoolsDeprecationWarning" not in output, output
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = set(zipfile.ZipFile(tmp_path / wheel).namelist())
    source = os.path.join(SERVER, "disttrain_server")
    for folder in ("templates", "static"):
        for name in os.listdir(os.path.join(source, folder)):
            assert f"disttrain_server/{folder}/{name}" in names, (name, sorted(names))
