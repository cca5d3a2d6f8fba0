"""No function of components/ is over MAX_LINES lines (the project issue "One place per strategy").

A function that long does several things at once, and each of them can only be read, tested and
changed inside the others. Split it into pieces that say what they do (argument groups, a route table,
the phases of a stage), as components/server/disttrain_server/main.py's parse_args is.

A function's length is read from the source with `ast`: from its `def` line to its last line
(end_lineno - lineno + 1), decorators left out, its docstring, comments and blank lines inside it
counted. Methods and nested functions are functions too; a nested one's lines also count for the
function around it.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPONENTS = ROOT / "components"
MAX_LINES = 100


def long_functions(source, filename="<source>", max_lines=MAX_LINES):
    """[(line, qualified name, length)] of the functions in `source` over `max_lines` lines, in file order;
    the qualified name is as Python's __qualname__ spells it, without its <locals> (Class.method, outer.inner)."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > max_lines:
                        found.append((child.lineno, name, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)  # functions defined under an if, a with or a try

    visit(ast.parse(source, filename=filename), "")
    return sorted(found)


def function_source(name, lines, indent=""):
    """A function `name` of `lines` lines in all (its def line and its body), each line indented by `indent`."""
    return f"{indent}def {name}():\n" + f"{indent}    x = 0\n" * (lines - 1)


def test_the_length_is_counted_from_the_def_line_to_the_last_and_the_limit_is_allowed():
    source = "".join(
        [
            "@decorator\n",  # line 1, not counted: at_the_limit is MAX_LINES lines from its def on line 2
            function_source("at_the_limit", MAX_LINES),
            function_source("one_over", MAX_LINES + 1),
        ]
    )
    assert long_functions(source) == [(2 + MAX_LINES, "one_over", MAX_LINES + 1)]


def test_methods_nested_and_conditionally_defined_functions_are_found_by_qualified_name():
    over = MAX_LINES + 1
    source = "".join(
        [
            "class Stage:\n",
            function_source("method", over, "    "),
            "def outer():\n",
            function_source("inner", over, "    "),
            "if True:\n",
            function_source("guarded", over, "    "),
            function_source("awaited", over).replace("def", "async def", 1),
        ]
    )
    names = [name for _, name, _ in long_functions(source)]
    assert names == ["Stage.method", "outer", "outer.inner", "guarded", "awaited"]


def test_no_function_of_the_components_is_over_the_limit():
    offenders = []
    for path in sorted(COMPONENTS.rglob("*.py")):
        where = path.relative_to(ROOT)
        for line, name, length in long_functions(path.read_text(encoding="utf-8"), str(where)):
            offenders.append(f"{where}:{line} {name} {length} lines")
    assert not offenders, (
        f"{len(offenders)} function(s) over {MAX_LINES} lines; split each into pieces that say "
        "what they do:\n  " + "\n  ".join(offenders)
    )
