#!/usr/bin/env python3
"""Baseline for the aggregator's memory: Python + TensorFlow + ONE model, evaluated on the held-out split
(what the aggregator does once per model), or with --params just print the parameter count.

    python bench/load_one_model.py MODEL.keras DATA_DIR
    python bench/load_one_model.py MODEL.keras --params
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from disttrain_contract.artifact import load_model  # noqa: E402
from disttrain_contract.evaluation import as_model_input, evaluate  # noqa: E402
from disttrain_contract.manifest import Manifest, read_split  # noqa: E402

model, meta = load_model(sys.argv[1])
if sys.argv[2] == "--params":
    print(f"PARAMS {model.count_params()}")
else:
    manifest = Manifest.read(sys.argv[2])
    x, y = read_split(sys.argv[2], manifest, manifest.test)
    print(evaluate(model, manifest.task, as_model_input(manifest.task, x), y, manifest.seed))
