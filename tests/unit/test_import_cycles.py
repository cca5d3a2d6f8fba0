"""No package of components/ has modules that import each other in a cycle.

A cycle works until someone moves an import or adds a name at the wrong place, and then fails as a
half-initialised module (ImportError: cannot import name ...), so a function-level import that hides
one counts too. Blueprints share what they need through small modules that import no blueprint
(shared.py, runs_data.py, openapi.py), not through each other.

The graph is read from the source with `ast`, not by importing: every `import` and `from ... import`
anywhere in a module (module level, functions, classes) that names a module of the package is an
edge. `from pkg import name` is an edge to pkg.name when that is a module, else to pkg (its
__init__.py). Importing a submodule also runs its package's __init__.py, but that edge is not
counted: every package has it, and it is a cycle only when __init__.py itself imports back.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_PACKAGE = ROOT / "components" / "server" / "disttrain_server"
PACKAGES = sorted(p.parent for p in (ROOT / "components").glob("*/disttrain_*/__init__.py"))


def module_names(package_dir):
    """{dotted module name: path} of every module under package_dir (the package itself included)."""
    package_dir = pathlib.Path(package_dir)
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = (package_dir.name, *path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(module, path, modules):
    """[(imported module, line, where)] of every import in the file that names one of `modules`;
    `where` is "module level" or the enclosing function or class."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, child.name if where == "module level" else f"{where}.{child.name}")
                continue
            targets = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from . import x, from .mod import y, from ..pkg import z
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                # `import pkg.a.b` imports pkg.a.b; a name of ours that is not a module file is ignored
                if target in modules and target != module:
                    found.append((target, child.lineno, where))
            visit(child, where)

    visit(tree, "module level")
    return found


def import_graph(package_dir):
    """{module: {imported module: [(line, where), ...]}} of the package's own imports."""
    modules = module_names(package_dir)
    graph = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line, where in imports_of(name, path, modules):
            graph[name].setdefault(target, []).append((line, where))
    return graph


def tangles(graph):
    """The sets of modules that import each other, directly or not (strongly connected components of
    more than one module: Tarjan's algorithm)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def strongconnect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                strongconnect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return components


def find_cycles(graph):
    """One cycle [a, b, ..., a] per tangle: the shortest one through its first module by name."""
    cycles = []
    for component in tangles(graph):
        start = min(component)
        # the shortest way from start back to itself inside the component (breadth first)
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            targets = sorted(t for t in graph[path[-1]] if t in component)
            if start in targets:
                cycles.append(path + [start])
                break
            for target in targets:
                if target not in seen:
                    seen.add(target)
                    paths.append(path + [target])
    return sorted(cycles)


def describe(graph, cycle):
    """'a -> b (b.py line 3, module level) -> a (a.py line 9, in f)' style: where each import is."""
    steps = [cycle[0]]
    for source, target in zip(cycle, cycle[1:]):
        line, where = graph[source][target][0]
        steps.append(
            f"{target} ({source.rsplit('.', 1)[-1]}.py line {line}, {where if where == 'module level' else 'in ' + where})"
        )
    return " -> ".join(steps)


def test_the_walk_reads_the_packages_imports():
    """(a broken walk would find no cycle in an empty graph)"""
    assert len(PACKAGES) == 7
    graph = import_graph(SERVER_PACKAGE)
    assert "disttrain_server.api" in graph["disttrain_server.app"]
    assert "disttrain_server.shared" in graph["disttrain_server.api"]
    copier = import_graph(ROOT / "components" / "copier" / "disttrain_copier")
    assert "disttrain_copier.dataset" in copier["disttrain_copier.tables"]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_package_has_an_import_cycle(package):
    graph = import_graph(package)
    cycles = find_cycles(graph)
    assert not cycles, f"import cycles in {package.name}:\n" + "\n".join(
        f"{', '.join(sorted(component))} import each other, e.g. {describe(graph, cycle)}"
        for component, cycle in zip(sorted(tangles(graph), key=min), cycles)
    )


def write_package(root, files):
    package = root / "pkg"
    package.mkdir()
    for name, source in files.items():
        (package / name).write_text(source)
    return package


def test_a_cycle_through_a_function_level_import_is_caught(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "import os\n\n\ndef later():\n    from pkg.c import value\n    return value\n",
            "c.py": "from . import a\n\nvalue = 1\n",
            "d.py": "from pkg.a import b\n",  # into the cycle, not part of it
        },
    )
    graph = import_graph(package)
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert describe(graph, ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]) == (
        "pkg.a -> pkg.b (a.py line 1, module level) -> pkg.c (b.py line 5, in later) -> pkg.a (c.py line 1, module level)"
    )


def test_no_cycle_no_finding(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "from pkg.app import make\n",
            "app.py": "from pkg import views, shared\n\n\ndef make():\n    return views, shared\n",
            "views.py": "from pkg.shared import thing\n\n\ndef view():\n    import pkg.shared\n    return thing, pkg.shared\n",
            "shared.py": "thing = 1\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg"] == {"pkg.app": [(1, "module level")]}
    assert graph["pkg.views"] == {"pkg.shared": [(1, "module level"), (5, "view")]}
    assert find_cycles(graph) == []


def test_an_init_that_imports_back_is_a_cycle(tmp_path):
    package = write_package(
        tmp_path,
        {"__init__.py": "from pkg.app import make\n", "app.py": "from pkg import helper\n\n\ndef make():\n    pass\n"},
    )
    (package / "__init__.py").write_text("from pkg.app import make\n\n\ndef helper():\n    pass\n")
    assert find_cycles(import_graph(package)) == [["pkg", "pkg.app", "pkg"]]


def test_no_blueprint_imports_another():
    """Flask blueprints share what they need through helper modules (shared.py, runs_data.py, model_calls.py,
    openapi.py ...), never through each other: a blueprint is a set of routes, and importing one from another
    ties their registration together."""
    modules = module_names(SERVER_PACKAGE)
    blueprints = {name for name, path in modules.items() if "Blueprint(" in path.read_text()}
    assert {"disttrain_server.api", "disttrain_server.v2", "disttrain_server.runs"} <= blueprints
    graph = import_graph(SERVER_PACKAGE)
    found = [
        f"{name} imports {target} (line {uses[0][0]})"
        for name in sorted(blueprints)
        for target, uses in sorted(graph[name].items())
        if target in blueprints
    ]
    assert not found, "blueprints importing blueprints:\n" + "\n".join(found)


def test_the_advisor_imports_the_trainers_api_not_its_command_line():
    """disttrain_advisor builds on the trainer's public API (TrainConfig, its tasks, strategies and cost models):
    nothing in it imports the trainer's CLI module, whose only job is to parse and call train()."""
    import ast

    advisor = ROOT / "components" / "advisor" / "disttrain_advisor"
    found = []
    for path in sorted(advisor.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            found += [(path.name, node.lineno, n) for n in names]
    assert any(n.startswith("disttrain_trainer.") for _, _, n in found)  # (the walk saw its imports)
    cli = [
        f"{f} line {line}: {n}"
        for f, line, n in found
        if n.startswith(("disttrain_trainer.main", "disttrain_trainer.config.check_flags"))
    ]
    assert not cli, cli
