"""Every Python package folder of a stage ships in its wheel and so in its image: a sub-package that its
pyproject.toml does not list is left out of the image while the editable install of the dev venv still
finds it (a new trainer sub-package once passed every make test and failed every image run)."""

import os
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPONENTS = sorted(
    d
    for d in os.listdir(os.path.join(ROOT, "components"))
    if os.path.isfile(os.path.join(ROOT, "components", d, "pyproject.toml"))
)


def package_folders(component):
    base = os.path.join(ROOT, "components", component)
    found = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__")) and not d.endswith(".egg-info")]
        if "__init__.py" in files:
            found.append(os.path.relpath(folder, base).replace(os.sep, "."))
    return sorted(found)


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_package_folder_is_listed(component):
    with open(os.path.join(ROOT, "components", component, "pyproject.toml"), "rb") as fh:
        setuptools = tomllib.load(fh).get("tool", {}).get("setuptools", {})
    packages = setuptools.get("packages")
    if isinstance(packages, dict) or packages is None:  # [tool.setuptools.packages.find]: found, not listed
        return
    missing = [p for p in package_folders(component) if p not in packages]
    assert not missing, f"components/{component}/pyproject.toml does not list {missing}: the image would not have them"
