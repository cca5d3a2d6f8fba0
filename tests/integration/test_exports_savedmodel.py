"""The aggregator's exports (issue 13): final/saved_model/<version>/ and final/model.tflite.

Per task, a real copier + trainer + aggregator run (one worker, a few epochs: the exports are the
subject, not the accuracy). Then, in a separate Python process as TF Serving would, the SavedModel is
loaded with tf.saved_model.load and its serving signature run on the held-out split: its outputs must
equal the Keras model's to 1e-5; `saved_model_cli show --all` must list the signature with the server's
input and output names, dtypes and graph tensor names (disttrain_server.signature announces those names
in /metadata); the TFLite model, run with tf.lite.Interpreter, must have the held-out accuracy report.json
says, within 1 point of the Keras model's. And a failed export publishes nothing; --exports none writes
neither; a re-publish gets a higher version and keeps the one before.
"""

import base64
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from server.serving import sample_model
from stages import BIN, read_report, stage

pytestmark = pytest.mark.slow

# task -> (source, epochs, batch); batch None: the copier and trainer run of the server tests' model of the
# sample (tests/server/serving.sample_model: one shard, the default batch of 64), trained once per session
RUNS = {"text": ("sample:movie-reviews", 2, None), "image": ("sample:digits", 3, 32), "faces": ("sample:faces", 3, 32)}
TOLERANCE = 1e-5

# Run as `python -c CHECK saved_model_dir signature input_name output_name inputs result.npy` in a fresh
# process: only TensorFlow and the SavedModel, no Keras model, no disttrain code but the quiet import.
CHECK = r"""
import base64, json, sys
import numpy as np
from disttrain_contract.tensorflow_import import import_tensorflow
tf = import_tensorflow()
path, signature, name, output, inputs, result = sys.argv[1:]
if inputs.endswith(".json"):  # encoded files, base64 in JSON as a TF Serving REST client sends them
    x = np.array([base64.b64decode(b) for b in json.load(open(inputs))], dtype=object)
else:
    x = np.load(inputs, allow_pickle=False)
fn = tf.saved_model.load(path).signatures[signature]
np.save(result, np.concatenate([fn(**{name: tf.constant(x[i:i + 256])})[output].numpy() for i in range(0, len(x), 256)]))
"""


def published(tmp_path_factory, task):
    """A workdir whose final/ the aggregator published with its default exports (once per session)."""
    root = tmp_path_factory.getbasetemp() / "exports" / task
    if not (root / "final" / "_SUCCESS").exists():
        source, epochs, batch = RUNS[task]
        if batch is None:  # (copied: the aggregator publishes into the workdir)
            shutil.copytree(sample_model(tmp_path_factory, source, epochs), root)
        else:
            stage("copier", "--source", source, "--n-shards", 1, "--workdir", root)
            stage("trainer", "--workdir", root, "--worker-index", 0, "--epochs", epochs, "--batch", batch)
        out = stage("aggregator", "--workdir", root).stdout
        assert "aggregator: SavedModel " in out and "aggregator: TFLite " in out, out
    return root


def report_of(root, final="final"):
    return read_report(root / final)


def held_out(root):
    """The held-out split as the Keras model takes it, and its labels."""
    from disttrain_contract.evaluation import as_model_input
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(str(root / "data"))
    x, y = read_split(str(root / "data"), manifest, manifest.test)
    return as_model_input(manifest.task, x), y


def keras_outputs(root, x):
    """The published Keras model's outputs, fed as the server feeds it (faces: OpenCV preprocessing first)."""
    from disttrain_contract.artifact import load_model
    from disttrain_contract.evaluation import predict
    from disttrain_contract.faces import preprocess, preprocessing_of

    model, meta = load_model(str(root / "final" / "model.keras"))
    if meta["task"] == "faces":
        x = preprocess(x, preprocessing_of(meta))
    return predict(model, x)


def run_signature(tmp_path, saved_model, signature, name, output, inputs):
    """The signature's outputs on `inputs`, computed by a fresh Python process."""
    if isinstance(inputs, list):  # encoded files
        path = tmp_path / "inputs.json"
        path.write_text(json.dumps([base64.b64encode(b).decode() for b in inputs]))
    else:
        path = tmp_path / "inputs.npy"
        np.save(path, inputs)
    result = tmp_path / "result.npy"
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(saved_model), signature, name, output, str(path), str(result)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return np.load(result).astype(np.float64)


def version_dir(root):
    section = report_of(root)["exports"]["saved_model"]
    path = root / "final" / section["path"]
    assert os.path.isdir(path) and os.path.basename(path) == str(section["version"])
    return path


def encoded_png(images):
    """PNG files of uint8 [n, h, w, c] images, written by OpenCV (BGR order for colour)."""
    import cv2

    out = []
    for image in images:
        ok, data = cv2.imencode(".png", image[..., ::-1] if image.shape[-1] == 3 else image)
        assert ok
        out.append(data.tobytes())
    return out


TASKS = ["text", pytest.param("image", marks=pytest.mark.long), pytest.param("faces", marks=pytest.mark.long)]


@pytest.mark.parametrize("task", TASKS)
def test_savedmodel_in_a_fresh_process_equals_the_keras_model(tmp_path, tmp_path_factory, task):
    from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES

    root = published(tmp_path_factory, task)
    x, _ = held_out(root)
    expected = keras_outputs(root, x)
    inputs = x.reshape(-1).astype(str) if task == "text" else x  # a text is one string per instance
    got = run_signature(tmp_path, version_dir(root), "serving_default", INPUT_NAMES[task], OUTPUT_NAMES[task], inputs)
    difference = np.abs(got - expected).max()
    print(f"{task}: {len(x)} held-out instances, SavedModel vs Keras max abs difference {difference:.3g}")
    assert got.shape == expected.shape and difference <= TOLERANCE
    assert report_of(root)["exports"]["saved_model"]["max_abs_diff_vs_keras"] <= TOLERANCE
    if task == "image":
        # encoded files through serving_bytes, decoded in the graph: lossless files of the model's
        # size decode to the same pixels, so the outputs are the Keras model's on those pixels
        got = run_signature(
            tmp_path, version_dir(root), "serving_bytes", "image_bytes", "probabilities", encoded_png(x)
        )
        print(f"image: serving_bytes (PNG) vs Keras max abs difference {np.abs(got - expected).max():.3g}")
        assert np.abs(got - expected).max() <= TOLERANCE


def saved_model_cli():
    """The console script TensorFlow installs, or its module if the venv has no script."""
    script = os.path.join(BIN, "saved_model_cli")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]


def cli_tensor(text, signature, kind, name):
    """(dtype, shape, tensor name) of inputs['name'] or outputs['name'] in saved_model_cli's listing."""
    block = text.split(f"signature_def['{signature}']:", 1)[1].split("signature_def['", 1)[0]
    entry = block.split(f"{kind}['{name}'] tensor_info:", 1)[1]
    lines = [line.strip() for line in entry.strip().splitlines()[:3]]
    return tuple(line.split(": ", 1)[1] for line in lines)


@pytest.mark.parametrize("task", TASKS)
def test_saved_model_cli_shows_the_servers_signature(tmp_path_factory, task):
    from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES

    root = published(tmp_path_factory, task)
    done = subprocess.run(
        [*saved_model_cli(), "show", "--all", "--dir", str(version_dir(root))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    name, output = INPUT_NAMES[task], OUTPUT_NAMES[task]
    dtype, shape = {
        "text": ("DT_STRING", "(-1)"),
        "image": ("DT_UINT8", "(-1, 8, 8, 1)"),
        "faces": ("DT_UINT8", "(-1, 32, 32, 1)"),
    }[task]
    # the graph tensor names disttrain_server.signature announces in TF Serving's /metadata
    assert cli_tensor(text, "serving_default", "inputs", name) == (dtype, shape, f"serving_default_{name}:0")
    out_dtype, out_shape, out_name = cli_tensor(text, "serving_default", "outputs", output)
    # the name disttrain_server.signature announces; an image SavedModel's second signature (serving_bytes)
    # is traced first and takes that name, so serving_default's output is StatefulPartitionedCall_1:0 there
    assert out_dtype == "DT_FLOAT" and out_name == (
        "StatefulPartitionedCall_1:0" if task == "image" else "StatefulPartitionedCall:0"
    )
    meta = report_of(root)["labels"]
    width = 64 if task == "faces" else len(meta)
    assert out_shape == f"(-1, {width})"
    assert "Method name is: tensorflow/serving/predict" in text
    signatures = report_of(root)["exports"]["saved_model"]["signatures"]
    assert signatures["serving_default"]["inputs"] == {
        name: {"dtype": dtype, "shape": json.loads(shape.replace("(", "[").replace(")", "]"))}
    }
    if task == "image":
        assert cli_tensor(text, "serving_bytes", "inputs", "image_bytes")[:2] == ("DT_STRING", "(-1)")
        assert sorted(signatures) == ["serving_bytes", "serving_default"]
    else:
        assert sorted(signatures) == ["serving_default"]


@pytest.mark.parametrize("task", TASKS)
def test_tflite_accuracy_is_the_reports_and_near_the_keras_models(tmp_path_factory, task):
    import tensorflow as tf

    from disttrain_contract.evaluation import evaluate
    from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES

    root = published(tmp_path_factory, task)
    report = report_of(root)
    lite = report["exports"]["tflite"]
    path = root / "final" / "model.tflite"
    assert os.path.getsize(path) == lite["size_bytes"]
    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    name, output = INPUT_NAMES[task], OUTPUT_NAMES[task]

    if task == "text":  # token ids in: the published model's own vectorizer first (see exports.py)
        from disttrain_contract.artifact import load_model

        vectorize = load_model(str(root / "final" / "model.keras"))[0].get_layer("vectorize")
        assert lite["input"]["name"] == "token_ids"

    def call(chunk, training=False):  # a tensor in and out, as evaluation.predict calls a model
        if task == "text":
            return tf.constant(runner(token_ids=vectorize(chunk).numpy().astype(np.int64))[output])
        return tf.constant(runner(**{name: chunk.numpy()})[output])

    x, y = held_out(root)
    manifest = json.load(open(root / "data" / "manifest.json"))
    # faces: the TFLite model takes raw crops and equalises them itself (preprocessing version 1: none outside)
    accuracy = evaluate(call, task, x, y, manifest["seed"], {"face_preprocessing": 1})["accuracy"]
    keras = report["final"]["test_accuracy"]
    print(
        f"{task}: TFLite {lite['size_bytes']:,} bytes, accuracy {accuracy:.4f} (Keras {keras:.4f}), "
        f"builtin ops only: {lite['builtin_ops_only']}, one instance {lite['latency_ms']['tflite_median']:.3f} ms "
        f"(Keras {lite['latency_ms']['keras_median']:.3f} ms), exports took {report['exports']['sec']:.1f} s"
    )
    assert accuracy == lite["test_accuracy"] and lite["keras_test_accuracy"] == keras
    assert abs(accuracy - keras) <= 0.01
    assert lite["max_abs_diff_vs_keras"] < 1e-4
    assert lite["latency_ms"]["calls"] == 50 and lite["latency_ms"]["tflite_median"] > 0
    assert lite["builtin_ops_only"] and not lite["select_tf_ops"], lite


def test_failed_export_publishes_nothing_and_none_exports_nothing(tmp_path_factory):
    root = published(tmp_path_factory, "text")
    # a file where the SavedModel's base directory must go: refused before anything is built
    broken = root / "broken"
    broken.mkdir()
    (broken / "saved_model").write_text("not a directory")
    result = stage("aggregator", "--workdir", root, "--savefile", broken / "model.keras", check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: export failed, nothing was published: cannot export the SavedModel: {broken / 'saved_model'} "
        "exists and is not a directory"
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(os.listdir(broken)) == ["saved_model"]  # no model, report, marker, tflite or staging left

    plain = root / "plain"
    stage("aggregator", "--workdir", root, "--savefile", plain / "model.keras", "--exports", "none")
    assert sorted(os.listdir(plain)) == ["_SUCCESS", "analysis.png", "model.keras", "report.json", "report.png"]
    assert report_of(root, "plain")["exports"] == {"requested": []}


@pytest.mark.long
def test_republish_gets_a_higher_version_and_keeps_the_previous_one(tmp_path_factory):
    root = published(tmp_path_factory, "text")
    first = report_of(root)["exports"]["saved_model"]["version"]
    versions = [first]
    for _ in range(2):
        stage("aggregator", "--workdir", root, "--exports", "saved_model")
        section = report_of(root)["exports"]
        assert section["requested"] == ["saved_model"] and "tflite" not in section
        assert section["stale"] == ["model.tflite"]  # the first publish's, left in place and named
        versions.append(section["saved_model"]["version"])
        assert versions[-1] > versions[-2]
        assert section["saved_model"]["versions_kept"] == versions[-2:]
        assert sorted(int(v) for v in os.listdir(root / "final" / "saved_model")) == versions[-2:]
    assert not [n for n in os.listdir(root / "final") if n.startswith(".")]  # no staging left behind
