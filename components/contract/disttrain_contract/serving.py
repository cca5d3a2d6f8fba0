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

SIGNATURE_NAME = "serving_default"  # TF Serving's default signature key
PREDICT_METHOD = "tensorflow/serving/predict"
INPUT_NAMES = {"text": "text", "image": "image", "faces": "face"}
OUTPUT_NAMES = {"text": "probabilities", "image": "probabilities", "faces": "embedding"}
BYTES_SIGNATURE_NAME = "serving_bytes"  # image models: encoded image files in, probabilities out
IMAGE_BYTES_INPUT = "image_bytes"
