"""disttrain-advise: whether distributing this training pays, and with which strategy (main.py says how).

The advisor imports the trainer's public API (disttrain_trainer: TrainConfig, its tasks, strategies and the
cost model each strategy owns), never its command-line module; it runs in the trainer's image."""
