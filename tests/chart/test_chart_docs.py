"""Every value is documented (values.yaml @param, README table) and covered by the schema."""

import json

import pytest

yaml = pytest.importorskip("yaml")

from chartlib import CHART  # noqa: E402
from values_table import BEGIN, END, params, table  # noqa: E402

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1]


def test_every_value_has_a_param_line():
    documented = [key for _, key, _ in params()]
    assert len(documented) == len(set(documented)), "a @param is repeated"
    missing = [leaf for leaf in leaves(VALUES) if not any(leaf == d or leaf.startswith(d + ".") for d in documented)]
    assert not missing, f"values without a '## @param' line: {missing}"


def test_every_param_line_names_a_value():
    for _, key, desc in params():
        node = VALUES
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"@param {key} is not in values.yaml"
            node = node[part]
        assert len(desc) > 10, f"@param {key} needs a real description"


def test_readme_table_is_up_to_date():
    readme = (CHART / "README.md").read_text()
    current = readme[readme.index(BEGIN) + len(BEGIN) : readme.index(END)].strip()
    assert current == table().strip(), "README value table is stale: run python tests/chart/values_table.py --write"
    for _, key, _ in params():
        assert f"| `{key}` |" in readme


def test_schema_and_values_have_the_same_keys():
    def walk(values, schema, path, shared=False):
        props = schema.get("properties")
        if props is None:
            return
        if shared:  # a shared definition (resources, image) may allow keys the defaults leave out
            assert set(values) <= set(props), f"{path}: {sorted(set(values) - set(props))} not in the schema"
        else:
            assert set(values) == set(props), (
                f"{path or '<top>'}: values {sorted(set(values) ^ set(props))} differ from the schema"
            )
        for key, value in values.items():
            sub, ref = props[key], False
            if "$ref" in sub:
                sub, ref = SCHEMA["definitions"][sub["$ref"].rsplit("/", 1)[1]], True
            if isinstance(value, dict):
                walk(value, sub, f"{path}.{key}" if path else key, ref)

    walk(VALUES, SCHEMA, "")


def test_readme_explains_how_to_run_on_a_cluster():
    readme = (CHART / "README.md").read_text()
    for needle in (
        "make images",
        "make push REGISTRY=",
        "helm install dt charts/disttrain",
        "--set workers=5",
        "storage.nfs.server",
        "nfsServer.enabled",
        "kubectl logs -f",
        "report.json",
        "port-forward",
        "helm test",
    ):
        assert needle in readme, needle
