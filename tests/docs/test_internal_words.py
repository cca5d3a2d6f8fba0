"""What users and contributors read names features and carries its measurements' machine, never the
project's own bookkeeping: no "issue 13" (the project's issue numbers), no commit hashes as context,
no "this machine" (which machine, for a reader of the docs site?).

Checked: docs/, every README*.md, the docstrings and comments of the Python code under components/, pipelines/,
bench/ and scripts/ (and the comments of their shell scripts), and the chart's values.yaml,
values.schema.json, ci/*.yaml and README.md. Citations of other projects' issues
(`keras-team/keras#20585`, `kubeflow/trainer#2699`) are fine. A measurement may say where it was
taken ("measured on a 2-core x86_64 host, 2026-11-23").
"""

import ast
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "disttrain"
SKIP_DIRS = {
    ".git",
    ".venv",
    ".venv-kserve",
    ".venv-kserve-storage",
    ".venv-kfp",
    ".venv-docs",
    ".cache",
    "site",
    "node_modules",
    "workdir",
    "build",
    "__pycache__",
}

# "issue 13", "Issue 9's goals", "issues 11 and 13", "issue #13": the project's own tracker. A
# reference preceded by owner/repo ("kubeflow/trainer issue 2699") cites another project and passes.
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
OTHER_PROJECT = re.compile(r"[\w.-]+/[\w.-]+\W{0,2}$")
# "this machine", "this 2-core development machine", "this machine's disk", "this idle machine".
THIS_MACHINE = re.compile(r"\bthis\s+(?:[\w-]+\s+){0,3}machine\b", re.IGNORECASE)
# A commit hash as context: 7-40 hex digits (at least one digit and one letter, so neither a word
# like "defaced" nor a number) after a word that makes it a reference ("at commit d8843e2", "a fresh
# clone of b07cce7", "until 1ca4a93", "on b07cce7's code"), or alone in parentheses ("(0a3f900)").
HEX = r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
COMMIT = re.compile(
    rf"(?:\b(?:commits?|at|of|on|since|until|before|after|from|in|to|with|by)\s+(?P<a>{HEX})\b(?!-)"
    rf"|\((?P<b>{HEX})\))",
    re.IGNORECASE,
)


def offences(text):
    """[(kind, matched text)] of every internal word in text."""
    found = []
    for m in ISSUE.finditer(text):
        if not OTHER_PROJECT.search(text[max(0, m.start() - 60) : m.start()]):
            found.append(("issue number", m.group(0)))
    found += [("this machine", m.group(0)) for m in THIS_MACHINE.finditer(text)]
    found += [("commit hash", m.group(0)) for m in COMMIT.finditer(text)]
    return found


def python_prose(path):
    """The docstrings and comments of a Python file, one string per docstring or comment."""
    source = path.read_text()
    out = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
    return out


def shell_comments(path):
    return [line for line in path.read_text().splitlines() if line.lstrip().startswith("#")]


def walk(top, pattern):
    for path in sorted(top.rglob(pattern)):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def checked_texts():
    """[(path relative to the repository, [texts])] of everything this test reads."""
    files = []
    for path in walk(ROOT / "docs", "*.md"):
        files.append((path, [path.read_text()]))
    for path in walk(ROOT, "README*.md"):
        if not path.is_relative_to(ROOT / "docs"):
            files.append((path, [path.read_text()]))
    for top in ("components", "bench", "scripts", "pipelines"):
        files += [(path, python_prose(path)) for path in walk(ROOT / top, "*.py")]
        files += [(path, shell_comments(path)) for path in walk(ROOT / top, "*.sh")]
    for path in [CHART / "values.yaml", CHART / "values.schema.json", *sorted((CHART / "ci").glob("*.yaml"))]:
        files.append((path, [path.read_text()]))
    return [(path.relative_to(ROOT), texts) for path, texts in files]


def test_no_internal_words():
    bad = []
    for path, texts in checked_texts():
        for text in texts:
            bad += [f"{path}: {kind}: {hit!r}" for kind, hit in offences(text)]
    assert not bad, "internal words (name the feature; let a measurement name its machine):\n" + "\n".join(bad)


def test_the_check_reads_what_it_should():
    paths = {str(p) for p, _ in checked_texts()}
    for needle in (
        "README.md",
        "docs/index.md",
        "bench/README.md",
        "components/server/README.md",
        "charts/disttrain/README.md",
        "charts/disttrain/values.yaml",
        "charts/disttrain/values.schema.json",
        "charts/disttrain/ci/one-worker-values.yaml",
        "components/trainer/disttrain_trainer/main.py",
        "bench/report.py",
        "scripts/gen_docs.py",
        "bench/run_all.sh",
    ):
        assert needle in paths, needle


@pytest.mark.parametrize(
    "text",
    [
        "Since the aggregator's quality gate (issue 19), the faces row is refused",
        "Issue 9's goals beside these figures",
        "the goals of issues 11 and 13",
        "see issue #13",
        "# issue 18: each worker keeps a validation split",
        "Every number was measured on this 2-core development machine on 2026-11-23.",
        "the text step on this machine",
        "a write on this machine's busy disk",
        "`make demo` was measured at commit 1d8bc65",
        "1,190 passed in a fresh clone of b07cce7",
        "Until 1ca4a93 it also printed",
        "with the watcher taught them (0a3f900) those passed",
        "the final run on b07cce7's server code",
        "at a4a8a04 in a fresh-clone CI run",
    ],
)
def test_caught(text):
    assert offences(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Keras 3's model.fit fails (keras-team/keras#20585)",
        "see kubeflow/trainer#2699 and google-ai-edge/LiteRT#6458",
        "kubeflow/trainer issue 2699 describes it",
        "measured on a 2-core x86_64 host, 2026-11-23",
        "worker 0/2: average, text task, init 501e33a29e8b",
        "the sha256 of its initial weights, e.g. 3f1a2b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70",
        "a shard of 1000000 examples",
        "one of defaced or effaced words",
        "the machine's load, on an idle 2-core machine",
        "issues are reported as JSON errors",
        "colour #1f77b4 in the plot",
    ],
)
def test_passed(text):
    assert not offences(text), offences(text)
