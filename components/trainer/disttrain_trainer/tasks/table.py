"""table (and array): numeric features -> a small MLP that starts with the copier's per-feature
statistics as a Normalization layer, so the user does not scale their columns. The built-in model for a
table when the user brings none; a classifier ends in a softmax over the labels, a regression in one
linear unit
scaled back to the target's unit from the target's training statistics."""

import keras
import numpy as np

from disttrain_trainer import privacy
from disttrain_trainer.tasks import base


def normalization(spec):
    """keras.layers.Normalization from the manifest's training statistics (per element of the last axis)."""
    stats = spec.get("statistics") or {}
    if not stats.get("mean"):
        return None
    variance = np.maximum(np.asarray(stats["variance"], dtype=np.float32), 1e-12)  # a constant column divides by ~0
    return keras.layers.Normalization(mean=np.asarray(stats["mean"], np.float32), variance=variance, name="normalize")


class Task(base.Task):
    name = "table"
    dropout = 0.1

    def build(self):
        spec = self.manifest.input
        inputs = keras.Input(shape=tuple(spec["shape"]), dtype="float32", name=spec.get("name", "features"))
        x = inputs
        # Differentially private training leaves out the copier's statistics (of the private training split,
        # which ε would not cover): the features and the target go in unscaled (privacy.NOT_COVERED)
        private = privacy.enabled(self.config)
        norm = None if private else normalization(spec)
        if norm is not None:
            x = norm(x)
        if len(spec["shape"]) > 1:
            x = keras.layers.Flatten(name="flatten")(x)
        return self.mlp(inputs, x, private)

    def mlp(self, inputs, x, private):
        """The hidden layers and the head on `x` (the inputs, normalised): the model."""
        for i in range(2):
            x = keras.layers.Dense(self.config.width, activation="relu", name=f"hidden{i}")(x)
        x = keras.layers.Dropout(self.config.dropout, name="dropout")(x)
        if self.problem == "regression":
            outputs = keras.layers.Dense(1, name="standardized")(x)
            target = None if private else self.manifest.target_statistics
            if target:  # the layers learn a standardised target; the output is in the target's unit
                outputs = keras.layers.Rescaling(
                    scale=float(np.sqrt(max(target["variance"], 1e-12))),
                    offset=float(target["mean"]),
                    name="prediction",
                )(outputs)
        else:
            outputs = keras.layers.Dense(len(self.manifest.labels), activation="softmax", name="probabilities")(x)
        return keras.Model(inputs, outputs, name=f"{self.manifest.task}_mlp")

    def dataset(self, x, y, batch, seed, index):
        return super().dataset(np.asarray(x, dtype=np.float32), y, batch, seed, index)

    def model_input(self, x):
        return np.asarray(x, dtype=np.float32)
