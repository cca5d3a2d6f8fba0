"""The served model's one input and one output, named and typed, as the compatible APIs announce them.

TF Serving clients read a `serving_default` signature_def (/v1/models/NAME/metadata) and may key
row instances and columnar inputs by the input's name; KServe's V2 clients read typed tensors
(/v2/models/NAME) and must name the input and its datatype in every request. Both come from here,
so what the metadata announces is exactly what the requests are checked against.

Names: the trainer's keras.Input names ("text", "image", "face") and the output layer's role
("probabilities" for classifiers, "embedding" for the faces model). Shapes are what a request
sends, batch first (-1): a text is one string per instance (not the model's internal [n, 1]
column), an image is uint8 pixels [n, height, width, channels].
"""

from dataclasses import dataclass

# Shared with the aggregator's SavedModel export (the server serves only SIGNATURE_NAME)
from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES, PREDICT_METHOD, SIGNATURE_NAME  # noqa: F401

# TF DataType enum names (TF Serving's JSON) -> the Open Inference Protocol's datatypes.
V2_DATATYPES = {"DT_STRING": "BYTES", "DT_UINT8": "UINT8", "DT_FLOAT": "FP32"}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a TF DataType enum name: DT_STRING, DT_UINT8 or DT_FLOAT
    shape: tuple  # -1 for the batch dimension
    graph_name: str  # the tensor's name in a SavedModel's graph, as TF Serving prints it

    @property
    def v2_datatype(self):
        return V2_DATATYPES[self.dtype]

    def tf_serving(self):
        """A TensorInfo in TF Serving's JSON (sizes are strings: int64 in proto3 JSON)."""
        dims = [{"size": str(size), "name": ""} for size in self.shape]
        return {"dtype": self.dtype, "tensor_shape": {"dim": dims, "unknown_rank": False}, "name": self.graph_name}

    def v2(self):
        """A $metadata_tensor of the Open Inference Protocol."""
        return {"name": self.name, "datatype": self.v2_datatype, "shape": list(self.shape)}


def input_tensor(loaded):
    """What a request sends: strings for a text model, uint8 pixels for an image or faces model."""
    name = INPUT_NAMES[loaded.task]
    spec = loaded.input_spec
    if spec["kind"] == "text":
        return Tensor(name, "DT_STRING", (-1,), f"serving_default_{name}:0")
    return Tensor(name, "DT_UINT8", (-1, spec["height"], spec["width"], spec["channels"]), f"serving_default_{name}:0")


def output_tensor(loaded):
    """Probabilities over the labels (classifiers) or the embedding (faces), float32, one row per instance."""
    width = loaded.meta["embedding_size"] if loaded.is_faces else len(loaded.labels)
    return Tensor(OUTPUT_NAMES[loaded.task], "DT_FLOAT", (-1, width), "StatefulPartitionedCall:0")


def signature_def(loaded):
    """TF Serving's GetModelMetadataResponse.metadata["signature_def"] for the served model."""
    inputs, outputs = input_tensor(loaded), output_tensor(loaded)
    return {
        "signature_def": {
            SIGNATURE_NAME: {
                "inputs": {inputs.name: inputs.tf_serving()},
                "outputs": {outputs.name: outputs.tf_serving()},
                "method_name": PREDICT_METHOD,
            }
        }
    }
