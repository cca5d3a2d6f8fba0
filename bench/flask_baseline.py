#!/usr/bin/env python3
"""The baseline server: what the original projects shipped, kept minimal on purpose.

Flask's development server, the model loaded once with keras.models.load_model, and
`model.predict` called per request. The originals did `model.predict(np.array([[text]]))`;
in Keras 3 that fails for a numpy string array (the data adapter cannot convert dtype <U..
to a tensor), so this calls `model.predict(tf.constant([[text]]))`, the smallest change that
works. Same URL and JSON shape as disttrain-server, so the same load generator drives both.

    python bench/flask_baseline.py MODEL.keras PORT
"""

import argparse
import os

# parsed before TensorFlow is imported: --help answers at once
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("model", help="a .keras model file")
parser.add_argument("port", type=int, help="the port to serve on (127.0.0.1)")
args = parser.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from flask import Flask, jsonify, request  # noqa: E402

model = keras.models.load_model(args.model, compile=False)
app = Flask(__name__)


@app.route("/v1/models/disttrain:predict", methods=["POST"])
def predict():
    texts = request.get_json()["instances"]
    # original: model.predict(np.array([[text]]))  -> fails in Keras 3 on a numpy string array
    probabilities = model.predict(tf.constant([[t] for t in texts]), verbose=0)
    return jsonify(predictions=probabilities.tolist())


@app.route("/healthz")
def healthz():
    return "ok"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=args.port)  # the development server (threaded by default)
