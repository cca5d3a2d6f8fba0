"""Untrusted files: nothing is ever unpickled (except through the copier's numpy-only
unpickler for the IMDB file) and models load in Keras safe mode, so a `.keras` carrying
Python code is refused instead of run."""

import ast
import pathlib

import numpy as np
import pytest

from faults.faultlib import SENTINEL_ENV, lambda_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ("components", "scripts", "docker")
# The one place allowed to touch pickle: a restricted Unpickler that only rebuilds numpy arrays.
RESTRICTED_UNPICKLER = ("components/copier/disttrain_copier/sources.py", "_NumpyOnlyUnpickler")
UNSAFE_MODULES = {"dill", "cloudpickle", "joblib", "shelve", "marshal", "jsonpickle"}


def unsafe_loading(source, relpath):
    """Every way `source` could run code from a data file: [(line, what)]."""
    tree = ast.parse(source)
    allowed_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (relpath, node.name) == RESTRICTED_UNPICKLER:
            allowed_lines.update(range(node.lineno, node.end_lineno + 1))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    problems.append((node.lineno, "allow_pickle is not literally False"))
                if kw.arg == "safe_mode" and not (isinstance(kw.value, ast.Constant) and kw.value.value is True):
                    problems.append((node.lineno, "safe_mode is not literally True"))
        if isinstance(node, ast.Attribute):
            if (
                node.attr in ("load", "loads", "Unpickler", "_Unpickler")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("pickle", "_pickle", "cPickle")
            ):
                if not (node.attr == "Unpickler" and node.lineno in allowed_lines):
                    problems.append((node.lineno, f"{node.value.id}.{node.attr}"))
            if node.attr == "enable_unsafe_deserialization":
                problems.append((node.lineno, "keras unsafe deserialization"))
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "_pickle"):
            problems.append((node.lineno, f"from {node.module} import ..."))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in UNSAFE_MODULES:
                    problems.append((node.lineno, f"import {name}"))
    return sorted(problems)


def python_files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "egg-info" not in str(path) and "/build/" not in str(path):
                yield path


def test_no_pickle_loading_and_no_unsafe_model_loading_in_the_code():
    files = list(python_files())
    assert len(files) > 20  # the scan sees the code
    found = {}
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        problems = unsafe_loading(path.read_text(encoding="utf-8"), rel)
        if problems:
            found[rel] = problems
    assert found == {}, f"code that may unpickle or run code from a file: {found}"
    # the allowed restricted unpickler is still what it claims to be
    sources = (ROOT / RESTRICTED_UNPICKLER[0]).read_text()
    assert "def find_class" in sources and "refusing to unpickle" in sources


@pytest.mark.parametrize(
    "snippet, what",
    [
        ("import numpy as np\nnp.load(p, allow_pickle=True)", "allow_pickle"),
        ("import numpy as np\nflag = True\nnp.load(p, allow_pickle=flag)", "allow_pickle"),
        ("import pickle\npickle.load(fh)", "pickle.load"),
        ("import pickle\npickle.loads(b)", "pickle.loads"),
        ("from pickle import loads", "from pickle"),
        ("import joblib", "import joblib"),
        ("keras.models.load_model(p, safe_mode=False)", "safe_mode"),
        ("keras.config.enable_unsafe_deserialization()", "unsafe"),
        ("import pickle\nclass U(pickle.Unpickler):\n    pass", "pickle.Unpickler"),
    ],
)
def test_the_scan_catches_each_pattern(snippet, what):
    problems = unsafe_loading(snippet, "components/x.py")
    assert problems and what in problems[0][1]


def test_the_restricted_unpickler_is_allowed_only_where_it_lives():
    snippet = "import pickle\nclass _NumpyOnlyUnpickler(pickle.Unpickler):\n    pass\n"
    assert unsafe_loading(snippet, RESTRICTED_UNPICKLER[0]) == []
    assert unsafe_loading(snippet, "components/server/x.py") != []


def test_load_model_refuses_a_lambda_layer_and_runs_none_of_it(tmp_path, monkeypatch, text_meta):
    import keras

    from disttrain_contract import ContractError
    from disttrain_contract.artifact import load_model

    path = lambda_model(str(tmp_path / "evil.keras"), text_meta)
    sentinel = tmp_path / "code-ran"
    monkeypatch.setenv(SENTINEL_ENV, str(sentinel))
    with pytest.raises(ContractError, match=r"cannot load model .*evil\.keras: ValueError: .*`Lambda` layer"):
        load_model(path)
    assert not sentinel.exists()
    # the file is a real gadget: without safe mode, loading and calling it runs its code
    unsafe = keras.models.load_model(path, compile=False, safe_mode=False)
    unsafe(np.zeros((1, 4), dtype=np.float32))
    assert sentinel.exists()


@pytest.fixture
def text_meta():
    """disttrain.json of a text worker model, as the trainer writes it."""
    return {
        "task": "text",
        "labels": ["rotten", "fresh"],
        "input": {"kind": "text"},
        "init_weights_sha256": "0" * 64,
        "strategy": "average",
        "seed": 42,
        "worker_index": 1,
        "workers": 2,
        "epochs": 1,
        "examples": 100,
        "vocab_sha256": "0" * 64,
    }
