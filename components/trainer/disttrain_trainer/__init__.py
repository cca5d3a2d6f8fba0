"""disttrain's trainer. Its public Python API (the CLI, disttrain-trainer, is a thin layer over it):

    from disttrain_trainer import TrainConfig, parse_config, train

    config = parse_config(["--strategy", "localsgd", "--workers", "2", "--worker-index", "1"])
    train(config)            # this worker's whole run; returns the exit code
    config.to_argv()         # the same run as a trainer command line (the advisor, the sweep, launchers)

A program that takes the trainer's flags beside its own (disttrain-advise) extends `build_parser()` and turns
what it parsed into a TrainConfig with `from_flags(parser, args)`.

The names are imported when first used (PEP 562), so that importing a submodule (the advisor's cost model,
the flag checks) stays free of what training needs.
"""

_PUBLIC = {
    "TrainConfig": "disttrain_trainer.config",
    "parse_config": "disttrain_trainer.config",
    "build_parser": "disttrain_trainer.config",
    "from_flags": "disttrain_trainer.config",
    "train": "disttrain_trainer.training",
}
__all__ = ["TrainConfig", "build_parser", "from_flags", "parse_config", "train"]


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'disttrain_trainer' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
