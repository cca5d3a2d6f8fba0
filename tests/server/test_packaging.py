"""The server's package ships the web demo's files, and building it prints no setuptools
warning (a newcomer's `make demo` installs it; the warning read like an error)."""

import os
import shutil
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(ROOT, "components", "server")


def test_the_wheel_holds_the_web_demo_and_building_it_warns_of_nothing(tmp_path):
    # A copy: setuptools builds in the source folder (build/, *.egg-info), and a build/ left in
    # the repository would hand stale files to the next build of the package or its image.
    source = tmp_path / "server"
    shutil.copytree(SERVER, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = tmp_path / "wheels"
    # --no-build-isolation: the venv's own setuptools, no index needed
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--verbose",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "would be ignored" not in output, output
    assert "SetuptoolsDeprecationWarning" not in output, output
    (wheel,) = [f for f in os.listdir(wheels) if f.endswith(".whl")]
    names = set(zipfile.ZipFile(wheels / wheel).namelist())
    package = os.path.join(SERVER, "disttrain_server")
    for folder in ("templates", "static"):
        for name in os.listdir(os.path.join(package, folder)):
            assert f"disttrain_server/{folder}/{name}" in names, (name, sorted(names))
