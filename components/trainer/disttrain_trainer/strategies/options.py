"""What each strategy asks of the command line, without TensorFlow. What a strategy is (whether its tasks talk,
one model or one per worker, its chart values) is its entry in disttrain_contract.strategies, which every stage
reads; this module holds one Options per entry (REGISTRY, in the contract's order), each owning
  flags      the flags only it (or its family) takes, with their help, defaults and value checks;
  misplaced  the refusal of its flags given to another strategy ("--sync-every applies to --strategy
             localsgd, not average");
  resolve    the defaults that depend on the strategy being chosen (parameterserver: one ps);
  cluster    TF_CONFIG for a connected strategy (cluster.configure) and how a task names itself in
             logs (`tag`);
  metadata   what its models record besides every strategy's facts (localsgd: sync_every, the outer
             optimizer and the wire when not the defaults) and how many
             examples a model says it was trained on.
Each Options is its strategy's package's (strategies/<name>/options.py, its OPTIONS), on the shared bases of
options_base.py; this module composes them. The training itself is the package's strategy.py, imported by
strategies.create once the flags are checked: `--help` and a flag error cost no TensorFlow import.
"""

import argparse
import importlib

from disttrain_contract.strategies import STRATEGIES, users_of_flag
from disttrain_trainer.strategies.options_base import Options


# one Options per entry of the contract's registry, in its order (a strategy without one fails here, at import)
REGISTRY = {
    name: importlib.import_module(f"disttrain_trainer.strategies.{name}.options").OPTIONS() for name in STRATEGIES
}
assert all(options.name == name for name, options in REGISTRY.items()), "a package's OPTIONS names another strategy"
NAMES = tuple(REGISTRY)
CONNECTED = tuple(name for name, options in REGISTRY.items() if options.connected)


def families():
    """Every class that introduces flags, once, in the order of the registry (a strategy's bases first)."""
    seen = []
    for options in REGISTRY.values():
        for cls in reversed(type(options).__mro__):
            if issubclass(cls, Options) and cls is not Options and "add_flags" in vars(cls) and cls not in seen:
                seen.append(cls)
    return seen


def add_flags(parser: argparse.ArgumentParser):
    """--strategy, and every strategy's own flags, one --help group per family."""
    parser.add_argument("--strategy", choices=NAMES, default="average", help="default: average")
    for cls in families():
        cls.add_flags(parser.add_argument_group(cls.title))


def check(args, error):
    """Refuse values no strategy takes and flags of another strategy than the chosen one; then the chosen
    strategy's settings, its defaults resolved (its StrategySettings; `args` is not changed). `error`:
    parser.error (exit 2)."""
    chosen = REGISTRY[args.strategy]
    for cls in families():  # (each family's own checks, not those it inherits: they run for their own family)
        if "check" in vars(cls):
            cls.check(args, error)
    for cls in families():
        message = (
            cls.misplaced(args, args.strategy) if "misplaced" in vars(cls) and not isinstance(chosen, cls) else None
        )
        if message:
            error(message)
    return chosen.resolve(args, error)


def users_of(dest):
    """The strategies that take the flag storing `dest` (a --params-from key), as the registry's settings name
    them (disttrain_contract.strategies; a test keeps them equal to these classes' flags); None: every
    strategy takes it."""
    users = users_of_flag("--" + dest.replace("_", "-"))
    return None if users is None else list(users)
