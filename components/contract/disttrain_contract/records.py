"""Reading a JSON record into a typed dataclass: one check per field, one line per bad field.

report.json (report.py), progress.json (progress.py), a trainer's marker and its metrics.json
(trainer_records.py) are read by other processes than the one that wrote them, and by newer code
than the one that wrote them (the server reads the reports of older runs on the volume). Their
readers go through `Fields`: a missing optional field is its default, a present field of the wrong
type is a RecordError that names the file, the field's path and what was expected, e.g.

    report.json: final.examples must be a number, got "many"

No TensorFlow, no dependency beyond the standard library: the server and the copier import it.
"""

import json
import math

from disttrain_contract.errors import ContractError


class RecordError(ContractError):
    """A record (report.json, progress.json, a trainer's marker or metrics.json) that is not of its documented form;
    the message names the field."""


def describe(value):
    """A bad value, short enough for one line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(value):
    """A JSON number (an int or a float; not a bool). nan and infinities count: Python's json writes them."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value):
    """The value if it is a finite number, else None."""
    return value if is_number(value) and math.isfinite(value) else None


class Fields:
    """The fields of one JSON object, read one at a time with their type checked.

    `what` names the file (report.json), `path` where this object is in it ("final", "workers[2]");
    every error is one line naming both."""

    def __init__(self, obj, what, path=""):
        self.what, self.path = what, path
        if not isinstance(obj, dict):
            raise RecordError(f"{what}: {path or 'the file'} must be a JSON object, got {describe(obj)}")
        self.obj = obj
        self.read = set()

    def name(self, key):
        return f"{self.path}.{key}" if self.path else key

    def error(self, key, expected):
        return RecordError(f"{self.what}: {self.name(key)} must be {expected}, got {describe(self.obj[key])}")

    def _get(self, key, required, default):
        self.read.add(key)
        if key not in self.obj:
            if required:
                raise RecordError(f"{self.what}: {self.name(key)} is missing")
            return False, default
        return True, self.obj[key]

    def string(self, key, required=False, default=None, nullable=True, choices=None):
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not isinstance(value, str):
            raise self.error(key, "a string")
        if choices is not None and value not in choices:
            raise self.error(key, f"one of {', '.join(choices)}")
        return value

    def integer(self, key, required=False, default=None, nullable=True):
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, "an integer")
        return value

    def number(self, key, required=False, default=None, nullable=True):
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not is_number(value):
            raise self.error(key, "a number")
        return value

    def boolean(self, key, required=False, default=None, nullable=True):
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not isinstance(value, bool):
            raise self.error(key, "true or false")
        return value

    def integer_list(self, key, required=False, default=None, nullable=True):
        """A list of integers (a count per worker)."""
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not isinstance(value, list) or any(isinstance(n, bool) or not isinstance(n, int) for n in value):
            raise self.error(key, "a list of integers")
        return value

    def json_object(self, key, required=False, default=None, nullable=True):
        """A JSON object, as the dict it is (a section another module owns)."""
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not isinstance(value, dict):
            raise self.error(key, "a JSON object")
        return value

    def array(self, key, required=False, default=None, nullable=True):
        present, value = self._get(key, required, default)
        if not present or (value is None and nullable):
            return value
        if not isinstance(value, list):
            raise self.error(key, "a list")
        return value

    def any(self, key, default=None):
        """A field of any JSON type (a section whose form its writer owns)."""
        return self._get(key, False, default)[1]

    def nested(self, key, index=None):
        """Fields of the object at `key` (or at `key`[index])."""
        value = self.obj[key] if index is None else self.obj[key][index]
        return Fields(value, self.what, self.name(key) + ("" if index is None else f"[{index}]"))

    def rest(self):
        """The fields not read: kept as they are, so that a record read and written again loses nothing a
        newer writer added."""
        return {key: value for key, value in self.obj.items() if key not in self.read}
