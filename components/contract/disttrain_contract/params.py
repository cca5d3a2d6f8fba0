"""Training parameters that travel between stages: the sweep's best.json -> the trainer's --params-from.

    WORKDIR/sweep/best.json = {"params": {"learning_rate": 0.004, "batch": 64, ...}, "value": ..., ...}

One list of the parameters and one check of their values, used by the sweep (its search-space
flags) and by the trainer (the file it is given), so the two cannot disagree on a name or a range.
"""

import math
import os

from disttrain_contract.atomic import read_json
from disttrain_contract.errors import ContractError

# name -> (type, lowest allowed, highest allowed or None, include the high bound, trainer flag)
PARAMS = {
    "learning_rate": (float, 0.0, None, False, "--learning-rate"),
    "batch": (int, 1, None, True, "--batch"),
    "width": (int, 1, None, True, "--width"),
    "dropout": (float, 0.0, 1.0, False, "--dropout"),
    "epochs": (int, 1, None, True, "--epochs"),
    "sync_every": (int, 1, None, True, "--sync-every"),  # localsgd only: searched by localsgd trials
}


def check_value(name, value, where):
    """A value for parameter `name`, converted to its type; ContractError naming `where` if it is not one."""
    if name not in PARAMS:
        raise ContractError(f"{where}: unknown parameter {name!r} (known: {', '.join(PARAMS)})")
    kind, low, high, high_ok, _ = PARAMS[name]
    what = "an integer" if kind is int else "a number"
    # JSON true/1.5 and text "64.0" are not a batch size: ints must be ints (or their digits)
    if isinstance(value, bool) or (kind is int and not isinstance(value, (int, str))):
        raise ContractError(f"{where}: {name} must be {what}, not {value!r}")
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        raise ContractError(f"{where}: {name} must be {what}, not {value!r}") from None
    if kind is float and not math.isfinite(converted):
        raise ContractError(f"{where}: {name} must be finite, not {value!r}")
    too_low = converted < low or (name == "learning_rate" and converted <= 0)
    too_high = high is not None and (converted > high or (converted == high and not high_ok))
    if too_low or too_high:
        bound = (f">= {low}" if name != "learning_rate" else "> 0") + (
            f" and {'<=' if high_ok else '<'} {high}" if high is not None else ""
        )
        raise ContractError(f"{where}: {name} must be {bound}, not {value!r}")
    return converted


def read_params_file(path):
    """best.json's parameters, checked: {name: value}; ContractError (exit 2) naming the file and the
    problem for a missing or unreadable file, a missing "params" object, an unknown key or a bad value."""
    if not os.path.isfile(path):
        raise ContractError(f"--params-from {path}: no such file (run the sweep first: disttrain-sweep / make sweep)")
    best = read_json(path, what=f"--params-from {path}")
    params = best.get("params") if isinstance(best, dict) else None
    if not isinstance(params, dict) or not params:
        raise ContractError(
            f"--params-from {path}: expected a JSON object with a non-empty \"params\" object (the sweep's best.json)"
        )
    return {name: check_value(name, value, f"--params-from {path}") for name, value in params.items()}
