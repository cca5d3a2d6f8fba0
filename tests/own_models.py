"""A user's data and models, written the way a user would: tables as CSV files and Keras models saved by
model.save(), none of them made by disttrain. Shared by the integration tests, the own-model benchmark
and the image and cluster runs.

    breast_cancer_csv(path)   scikit-learn's breast-cancer table: 30 numeric columns + `label` (malignant, benign)
    diabetes_csv(path)        its diabetes table: 10 numeric columns + `progression` (a regression target)
    wine_csv(path)            its wine table: 13 numeric columns + `label` (3 classes)
    classifier(...), regressor(...)   small Keras models of the kind a notebook builds
    adamw_schedule_classifier(data)   the classifier compiled with AdamW + CosineDecay + weight decay + clipnorm
    batch_norm_cnn_file(path, blocks) a small convolutional model file with batch normalization, for the 8x8 digits
    random_layers_cnn_file(path)      one with augmentation, noise and dropout layers (no seeds), for the 8x8 digits
    digit_image_folders(directory)    scikit-learn's digits as 32x32 RGB PNG files in one folder per label (images:DIR)
    CONFORMANCE_MODULE, sigmoid_layer, train_step, adamw_schedule, mobilenetv3small, efficientnetb0
                                      the conformance set's models (the shapes real users bring) and their classes
"""

import csv
import json
import os
import shutil
import textwrap

import numpy as np


def _write_csv(path, names, x, label_name, labels):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*names, label_name])
        for row, label in zip(x, labels):
            writer.writerow([*(repr(float(v)) for v in row), label])
    return path


def column_names(raw):
    return [name.replace(" ", "_") for name in raw]


def breast_cancer_csv(path):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return _write_csv(
        path, column_names(data.feature_names), data.data, "label", [data.target_names[t] for t in data.target]
    )


def diabetes_csv(path):
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    return _write_csv(
        path, column_names(data.feature_names), data.data, "progression", [repr(float(t)) for t in data.target]
    )


def wine_csv(path):
    from sklearn.datasets import load_wine

    data = load_wine()
    return _write_csv(
        path, column_names(data.feature_names), data.data, "label", [data.target_names[t] for t in data.target]
    )


def table_statistics(manifest_path):
    """(mean, variance) per feature from a copied dataset's manifest: what a user would compute in a notebook."""

    stats = json.load(open(manifest_path))["input"]["statistics"]
    return np.asarray(stats["mean"], np.float32), np.maximum(np.asarray(stats["variance"], np.float32), 1e-12)


def classifier(n_features, mean, variance, head="sigmoid", hidden=16, seed=0, compile=True):
    """A notebook's tabular classifier: Normalization, one hidden layer, and a head:
    "sigmoid" (one unit, two labels), "softmax" (two units) or "logits" (two units, from_logits=True)."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(n_features,), name="measurements")
    x = keras.layers.Normalization(mean=mean, variance=variance)(inputs)
    x = keras.layers.Dense(hidden, activation="relu")(x)
    if head == "sigmoid":
        outputs = keras.layers.Dense(1, activation="sigmoid", name="malignant_or_benign")(x)
        loss = "binary_crossentropy"
    elif head == "softmax":
        outputs = keras.layers.Dense(2, activation="softmax")(x)
        loss = "sparse_categorical_crossentropy"
    else:
        outputs = keras.layers.Dense(2)(x)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = keras.Model(inputs, outputs)
    if compile:
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
    return model


def adamw_schedule_classifier(data, **options):
    """The classifier for a copied table (DATA: its data directory), compiled with AdamW on a CosineDecay
    schedule (3e-3 over 200 steps), weight decay 0.004 and clipnorm 1, and `options` (more of AdamW's)."""
    import keras

    mean, variance = table_statistics(os.path.join(data, "manifest.json"))
    model = classifier(len(mean), mean, variance, compile=False)
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=200)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.004, clipnorm=1.0, **options),
        loss="binary_crossentropy",
    )
    return model


def regressor(n_features, mean, variance, target_mean, target_std, hidden=32, seed=0):
    """A notebook's regression model: Normalization in, the target's scale out."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(n_features,), name="measurements")
    x = keras.layers.Normalization(mean=mean, variance=variance)(inputs)
    x = keras.layers.Dense(hidden, activation="relu")(x)
    x = keras.layers.Dense(1)(x)
    outputs = keras.layers.Rescaling(target_std, target_mean, name="progression")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    return model


def batch_norm_cnn_file(path, blocks=1):
    """`blocks` x (a convolution, batch normalization, ReLU) and pooling, as a network nested in the model the
    way a keras.applications backbone is, then a softmax head: for the 8x8 digits, saved as a user's model
    file; returns the path. What local SGD's syncs do to batch-norm statistics is the same for any model
    with them: this one traces in seconds where MobileNetV2 takes minutes."""
    import keras

    keras.utils.set_random_seed(7)
    inputs = keras.Input((8, 8, 1))
    x = features_in = keras.Input((8, 8, 1))
    for block in range(blocks):
        x = keras.layers.Conv2D(16 * (1 + block // 2), 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    features = keras.Model(features_in, keras.layers.GlobalAveragePooling2D()(x), name="features")
    outputs = keras.layers.Dense(10, activation="softmax")(features(keras.layers.Rescaling(1 / 16)(inputs)))
    keras.Model(inputs, outputs).save(path)
    return path


def random_layers_cnn_file(path):
    """A small convolutional model file for the 8x8 digits whose training draws random numbers in four layers:
    random flips and translations (augmentation), Gaussian noise and dropout, none of them given a seed (as a
    notebook writes them); returns the path. A file stores the layers' weights, not their generators' state."""
    import keras

    keras.utils.set_random_seed(11)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.RandomFlip("horizontal")(x)
    x = keras.layers.RandomTranslation(0.125, 0.125)(x)
    x = keras.layers.GaussianNoise(0.1)(x)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.Dropout(0.3)(keras.layers.Flatten()(x))
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(path)
    return path


def digit_image_folders(directory, per_class=30, size=32):
    """The first `per_class` of each of scikit-learn's 8x8 digits, scaled to 0..255, upscaled to size x size and
    written as RGB PNG files into DIRECTORY/<label>/<n>.png: a photo folder of the kind `images:DIR` reads.
    Returns the directory."""
    import cv2
    from sklearn.datasets import load_digits

    digits = load_digits()
    for label in range(10):
        folder = os.path.join(directory, str(label))
        os.makedirs(folder, exist_ok=True)
        for n, pixels in enumerate(digits.images[digits.target == label][:per_class]):
            grey = cv2.resize((pixels * 255 / 16).astype(np.uint8), (size, size), interpolation=cv2.INTER_LINEAR)
            assert cv2.imwrite(os.path.join(folder, f"{n:03d}.png"), np.repeat(grey[..., None], 3, axis=-1))
    return str(directory)


# A user's module: a registered custom layer and build(spec). Written into a directory that goes on
# PYTHONPATH, as a ConfigMap or a derived image would put it.
USER_MODULE = textwrap.dedent('''
    """The user's model code: a custom layer and build(spec)."""
    import keras


    @keras.saving.register_keras_serializable(package="tabular_models")
    class FeatureGate(keras.layers.Layer):
        """Learns one weight per feature (a custom layer with state)."""

        def build(self, input_shape):
            self.gate = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gate")

        def call(self, x):
            return x * self.gate


    def build(spec):
        inputs = keras.Input(shape=spec.input.shape, name=spec.input.name)
        x = keras.layers.Normalization(mean=spec.statistics["mean"], variance=spec.statistics["variance"])(inputs)
        x = FeatureGate(name="gate")(x)
        x = keras.layers.Dense(16, activation="relu")(x)
        if spec.problem == "regression":
            t = spec.target_statistics
            out = keras.layers.Rescaling(t["variance"] ** 0.5, t["mean"])(keras.layers.Dense(1)(x))
        else:
            out = keras.layers.Dense(spec.n_outputs, activation="softmax", name="probabilities")(x)
        return keras.Model(inputs, out)


    def not_a_model(spec):
        return "a string"
''')


def write_user_module(directory, name="tabular_models"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.py"), "w") as fh:
        fh.write(USER_MODULE)
    return str(directory)


CONFORMANCE_MODULE_NAME = "conformance_models"
CONFORMANCE_MODULE = textwrap.dedent('''
    """A user's registered classes: an output layer with its sigmoid inside, and a model with its own step."""
    import keras
    import tensorflow as tf


    @keras.saving.register_keras_serializable(package="conformance_models")
    class SharpenedProbability(keras.layers.Layer):
        """One unit: sigmoid(sharpness * (x . w + b)), the second label's probability; no `activation` attribute."""

        def __init__(self, sharpness=2.0, **kwargs):
            super().__init__(**kwargs)
            self.sharpness = sharpness

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 1), initializer="glorot_uniform", name="w")
            self.b = self.add_weight(shape=(1,), initializer="zeros", name="b")

        def call(self, x):
            return tf.sigmoid(self.sharpness * (tf.matmul(x, self.w) + self.b))

        def get_config(self):
            return {**super().get_config(), "sharpness": self.sharpness}


    @keras.saving.register_keras_serializable(package="conformance_models")
    class ConfidencePenalised(keras.Model):
        """Its own train_step: the compiled loss minus `beta` times the predictions' mean entropy (a confidence
        penalty), and a count of the steps it took in a weight."""

        def __init__(self, *args, beta=0.1, **kwargs):
            super().__init__(*args, **kwargs)
            self.beta = beta
            self.own_steps = self.add_weight(shape=(), initializer="zeros", trainable=False, name="own_steps")

        def get_config(self):
            return {**super().get_config(), "beta": self.beta}

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                entropy = -tf.reduce_mean(tf.reduce_sum(y_pred * tf.math.log(y_pred + 1e-7), axis=-1))
                loss = self.compute_loss(x, y, y_pred) - self.beta * entropy
            gradients = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
            self.own_steps.assign_add(1.0)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}
''')


# ---------------------------------------------------------------- the conformance set's models, built as a user builds them
# The shapes real users bring (tests/integration/test_conformance.py and bench/own_model.py). A table model takes
# the copied data's directory (its manifest's statistics and width) and a seed (its initial weights); the
# registered classes are CONFORMANCE_MODULE's, which must be importable (write_conformance_module).
def write_conformance_module(directory):
    """CONFORMANCE_MODULE written into `directory` (made if missing) and imported here, its classes registered for
    building the models and loading the published ones; the environment for the stages, with it on PYTHONPATH."""
    import importlib
    import sys

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{CONFORMANCE_MODULE_NAME}.py"), "w") as fh:
        fh.write(CONFORMANCE_MODULE)
    sys.path.insert(0, str(directory))
    try:
        importlib.import_module(CONFORMANCE_MODULE_NAME)
    finally:
        sys.path.remove(str(directory))
    return with_pythonpath(directory)


def keras_application(name, seed=None):
    """keras.applications.<name> as a user takes it: 32x32 RGB, weights=None, 10 classes, compiled with Adam."""
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = getattr(keras.applications, name)(input_shape=(32, 32, 3), weights=None, classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def mobilenetv3small(data=None, seed=None):
    return keras_application("MobileNetV3Small", seed)


def efficientnetb0(data=None, seed=None):
    return keras_application("EfficientNetB0", seed)


def normalised_input(data):
    """The table's input (as wide as its features) and a hidden layer on its normalised features."""
    import keras

    mean, variance = table_statistics(os.path.join(data, "manifest.json"))
    inputs = keras.Input(shape=(len(mean),), name="measurements")
    x = keras.layers.Normalization(mean=mean, variance=variance)(inputs)
    return inputs, keras.layers.Dense(16, activation="relu")(x)


def sigmoid_layer(data, seed=1):
    import keras
    from conformance_models import SharpenedProbability

    keras.utils.set_random_seed(seed)
    inputs, hidden = normalised_input(data)
    model = keras.Model(inputs, SharpenedProbability(name="benign")(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def train_step(data, seed=2):
    import keras
    from conformance_models import ConfidencePenalised

    keras.utils.set_random_seed(seed)
    inputs, hidden = normalised_input(data)
    model = ConfidencePenalised(inputs, keras.layers.Dense(2, activation="softmax")(hidden), beta=0.05)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def adamw_schedule(data, seed=3, decay_steps=60):
    """Compiled with AdamW(CosineDecay(0.01, decay_steps, alpha=0.1), weight_decay=0.004, clipnorm=1.0)."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs, hidden = normalised_input(data)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(hidden))
    schedule = keras.optimizers.schedules.CosineDecay(0.01, decay_steps=decay_steps, alpha=0.1)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.004, clipnorm=1.0),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


# ---------------------------------------------------------------- running the stages on them
def copied_table(root, name, write_csv, *copier_args):
    """ROOT/NAME.csv (ROOT: a pathlib.Path) written by `write_csv` and copied by the real copier into 2 shards;
    returns the data directory (each test copies it into its own workdir: workdir_with)."""
    from stages import stage

    csv = write_csv(str(root / f"{name}.csv"))
    stage("copier", "--source", f"table:{csv}", "--n-shards", 2, "--workdir", root / "work", *copier_args)
    return root / "work" / "data"


def workdir_with(data, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(data, work / "data")
    return work


def saved(model, path):
    model.save(str(path))
    return str(path)


def train(work, *args, index=0, env=None):
    from stages import stage

    return stage("trainer", "--workdir", work, "--worker-index", index, "--batch", 32, *args, check=False, env=env)


def with_pythonpath(directory):
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))}


def only_error_line(result):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def start_trainers(work, workers, strategy, *trainer_args, epochs=12, env=None, batch=32):
    """The group's trainer processes (a parameter-server group: the chief and one server too), `batch` examples a
    step per worker, on ports of their own; worker i logs to WORK/worker-<i>.log."""
    from stages import free_port_block, start_stage

    tasks = workers + (2 if strategy == "parameterserver" else 0)
    port = free_port_block(tasks)
    return [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            workers,
            "--epochs",
            epochs,
            "--batch",
            batch,
            "--strategy",
            strategy,
            "--port",
            port,
            *trainer_args,
            *(("--ps", 1) if strategy == "parameterserver" else ()),
            log=str(work / f"worker-{i}.log"),
            env=env,
        )
        for i in range(tasks)
    ]


def run_own_pipeline(work, workers, strategy, *trainer_args, epochs=12, env=None, aggregator_args=(), batch=32):
    from stages import read_report, stage

    procs = start_trainers(work, workers, strategy, *trainer_args, epochs=epochs, env=env, batch=batch)
    for i, proc in enumerate(procs):
        if proc.wait(timeout=600) != 0:
            for p in procs:
                p.kill()
            raise AssertionError(f"trainer {i} failed:\n" + open(work / f"worker-{i}.log").read()[-3000:])
    stage("aggregator", "--workdir", work, "--expect", workers, "--timeout", 60, *aggregator_args, env=env)
    return read_report(work / "final")
