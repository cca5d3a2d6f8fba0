"""The search space: one dimension per trainer flag, parsed from a short text form.

    LOW:HIGH     a range (learning_rate, sync_every: sampled on a log scale; epochs, width, batch,
                 sync_every: integers)
    A,B,C        a choice among these values
    V            a fixed value (not searched)

The names are the keys of best.json's "params" and of the trainer's --params-from, so a
parameter the sweep finds is one the trainer takes (PARAMS below is the one list of them).
"""

import dataclasses
from disttrain_contract import ContractError
from disttrain_contract.params import PARAMS, check_value
from disttrain_contract.strategies import DEFAULT, names_where, strategy_of

# Defaults per task, around the trainer's own defaults (text: lr 0.003, width 64, dropout 0.5,
# 5 epochs; image: lr 0.001, 64 hidden units, dropout 0.3, 20 epochs), kept short so a sweep of
# 8-12 trials fits in minutes on two cores.
DEFAULTS = {
    "text": {
        "learning_rate": "3e-4:3e-2",
        "batch": "32,64,128",
        "width": "32,64,128",
        "dropout": "0:0.6",
        "epochs": "2:6",
    },
    "image": {
        "learning_rate": "1e-4:1e-2",
        "batch": "32,64,128",
        "width": "32,64,128",
        "dropout": "0:0.5",
        "epochs": "8:20",
    },
    # tables and arrays: a few hundred to thousands of rows, an MLP (or the user's own model)
    "table": {
        "learning_rate": "1e-4:3e-2",
        "batch": "16,32,64",
        "width": "16,32,64,128",
        "dropout": "0:0.4",
        "epochs": "10:40",
    },
}
DEFAULTS["array"] = DEFAULTS["table"]
# localsgd's H (--sync-every), searched only by sweeps whose trials are localsgd groups
# (--strategy localsgd): one worker alone has nothing to average. Around the trainer's default
# of 32; a text epoch of a 2-worker group is ~80 steps per worker, so 128 averages less than twice
# an epoch, and digits' ~12 steps per epoch make 64 and 128 one average per 5-10 epochs.
SYNC_EVERY_DEFAULT = "8,16,32,64,128"
# the dimensions a strategy's trials search besides the task's (disttrain_contract.strategies: sweep_dimensions)
STRATEGY_DIMENSIONS = {"sync_every": SYNC_EVERY_DEFAULT}
# ranges sampled on a log scale: their effect is by factors, not by steps
LOG_SCALE = ("learning_rate", "sync_every")


@dataclasses.dataclass(frozen=True)
class Dimension:
    name: str
    low: float = None
    high: float = None
    choices: tuple = None  # a choice, or one value when fixed

    @property
    def fixed(self):
        return self.choices is not None and len(self.choices) == 1

    def suggest(self, trial):
        if self.fixed:
            trial.set_user_attr(self.name, self.choices[0])  # recorded, but not a searched parameter
            return self.choices[0]
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if PARAMS[self.name][0] is int:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.name in LOG_SCALE)
        return trial.suggest_float(self.name, self.low, self.high, log=self.name in LOG_SCALE)

    def describe(self):
        if self.choices is not None:
            return ",".join(map(str, self.choices))
        return f"{self.low:g}:{self.high:g}" + (" (log)" if self.name in LOG_SCALE else "")


def parse_dimension(name, text):
    """'1e-4:1e-2' | '32,64' | '0.3' -> Dimension; ContractError naming the flag on bad text."""
    flag = f"--{name.replace('_', '-')}"
    text = str(text).strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2:
            raise ContractError(f"{flag} {text!r}: a range is LOW:HIGH")
        low, high = (check_value(name, p, flag) for p in parts)
        if not low < high:
            raise ContractError(f"{flag} {text!r}: LOW must be below HIGH")
        return Dimension(name, low=low, high=high)
    values = [check_value(name, v, flag) for v in text.split(",") if v.strip()]
    if not values:
        raise ContractError(f"{flag} is empty: give LOW:HIGH, A,B,C or one value")
    if len(set(values)) != len(values):
        raise ContractError(f"{flag} {text!r}: a value is listed twice")
    return Dimension(name, choices=tuple(values))


def build_space(task, overrides, strategy=DEFAULT):
    """The task's default space with the given flags (name -> text, None = default) replacing dimensions, and the
    strategy's own dimensions (localsgd: sync_every)."""
    if task not in DEFAULTS:
        raise ContractError(f"the sweep searches text, image, table and array tasks; this dataset's task is {task}")
    defaults = dict(DEFAULTS[task])
    for name, default in STRATEGY_DIMENSIONS.items():
        if name in strategy_of(strategy).sweep_dimensions:
            defaults[name] = default
        elif overrides.get(name):
            users = names_where(lambda s, name=name: name in (s.sweep_dimensions or ()))
            raise ContractError(
                f"--{name.replace('_', '-')} is searched by {' and '.join(users)} trials only: add "
                f"--strategy {users[0]}"
            )
    return {name: parse_dimension(name, overrides.get(name) or default) for name, default in defaults.items()}


def parse_start(text, space):
    """--start 'learning_rate=1e-5,batch=64' -> {name: value}: the first trial's parameters (a
    starting point the sweep must beat). Unnamed dimensions are left to the sampler."""
    start = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ContractError(f"--start {text!r}: each item is NAME=VALUE")
        name = name.strip().replace("-", "_")
        start[name] = check_value(name, value.strip(), "--start")
        dim = space[name]
        if dim.choices is not None and start[name] not in dim.choices:
            raise ContractError(f"--start: {name}={value} is not one of the searched values {dim.describe()}")
    return start


def distribution_sketch(space):
    """The space as JSON (stored on the study, so a second process with other flags is refused)."""
    return {name: dim.describe() for name, dim in space.items()}


def params_of(trial, space):
    """Every parameter of a finished trial, searched and fixed: what the trainer gets."""
    return {name: trial.params[name] if name in trial.params else trial.user_attrs[name] for name in space}


__all__ = [
    "PARAMS",
    "DEFAULTS",
    "SYNC_EVERY_DEFAULT",
    "Dimension",
    "check_value",
    "parse_dimension",
    "build_space",
    "parse_start",
    "distribution_sketch",
    "params_of",
]
