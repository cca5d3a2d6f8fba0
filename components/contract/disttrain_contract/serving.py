"""The names a served model's signature uses, shared by the server (which speaks TF Serving's REST
API and KServe's V2 protocol over the Keras model) and the aggregator's SavedModel export (which
stock TensorFlow Serving and KServe's TensorFlow runtime serve): a request body that works against
one works against the other.

Inputs: the trainer's keras.Input names ("text", "image", "face"). Outputs: the output layer's role
("probabilities" for classifiers, "embedding" for the faces model). An image SavedModel has a second
signature taking encoded image files (PNG, JPEG, ...) as strings: TF Serving's REST API base64-decodes
a {"b64": ...} value for any string input; the `_bytes` suffix is its convention (and Vertex AI's)
for binary tensors, so the name says what the input holds.
"""

from disttrain_contract.tasks import TASKS

SIGNATURE_NAME = "serving_default"  # TF Serving's default signature key
PREDICT_METHOD = "tensorflow/serving/predict"
# the built-in models' (tasks.Task.input_name, output_name): {"text": "text", "image": "image", "faces": "face"}
INPUT_NAMES = {name: task.input_name for name, task in TASKS.items() if task.input_name}
OUTPUT_NAMES = {name: task.output_name for name, task in TASKS.items() if task.output_name}
BYTES_SIGNATURE_NAME = "serving_bytes"  # image models: encoded image files in, probabilities out
IMAGE_BYTES_INPUT = "image_bytes"
