"""Check InferenceService documents against the types of KServe's own Python SDK (run with the
kserve venv's python by tests/chart/test_chart_kserve.py; see tests/kserve_venv.py for why).

stdin: a JSON list of documents; stdout: a JSON list, per document, of null (it fits) or the
message naming the path of the first value the SDK's types do not allow. Every key must be a field
of the SDK's model class at that place (V1beta1InferenceService, V1beta1ModelSpec, the Kubernetes
client's V1ResourceRequirements, ...), with a value of the field's type; apiVersion and kind must
be the SDK's constants.
"""

import json
import re
import sys

import kserve
import kubernetes.client

PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def sdk_class(name):
    for module in (kserve, kubernetes.client):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no SDK model class {name}")


def check(value, type_name, where):
    """Raise AssertionError naming the path of the first value that the SDK's types do not allow."""
    if type_name in PRIMITIVES:
        assert isinstance(value, PRIMITIVES[type_name]), f"{where}: {value!r} is not {type_name}"
        return
    if m := re.fullmatch(r"[lL]ist\[(.+)\]", type_name):
        assert isinstance(value, list), f"{where}: not a list"
        for i, item in enumerate(value):
            check(item, m.group(1), f"{where}[{i}]")
        return
    if m := re.fullmatch(
        r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name
    ):  # the kubernetes client's and KServe's spellings
        assert isinstance(value, dict), f"{where}: not a map"
        for key, item in value.items():
            check(item, m.group(1) or m.group(2), f"{where}.{key}")
        return
    cls = sdk_class(type_name)
    assert isinstance(value, dict), f"{where}: not an object ({type_name})"
    by_key = {key: attr for attr, key in cls.attribute_map.items()}
    for key, item in value.items():
        assert key in by_key, f"{where}: {key!r} is not a field of {type_name} (fields: {sorted(by_key)})"
        check(item, cls.openapi_types[by_key[key]], f"{where}.{key}")


def verdict(document):
    try:
        assert (document.get("apiVersion"), document.get("kind")) == (
            kserve.constants.KSERVE_V1BETA1,
            kserve.constants.KSERVE_KIND_INFERENCESERVICE,
        ), f"InferenceService: apiVersion/kind {document.get('apiVersion')}/{document.get('kind')} are not the SDK's"
        check(document, "V1beta1InferenceService", "InferenceService")
    except AssertionError as err:
        return str(err)
    return None


if __name__ == "__main__":
    print(json.dumps([verdict(d) for d in json.load(sys.stdin)]))
