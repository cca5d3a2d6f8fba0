"""The served model's inputs and its one output, named and typed, as the compatible APIs announce them.

TF Serving clients read a `serving_default` signature_def (/v1/models/NAME/metadata) and may key
row instances and columnar inputs by the input's name; KServe's V2 clients read typed tensors
(/v2/models/NAME) and must name the input and its datatype in every request. Both come from here,
so what the metadata announces is exactly what the requests are checked against.

Names: the trainer's keras.Input names ("text", "image", "face") and the output layer's role
("probabilities" for classifiers, "embedding" for the faces model). Shapes are what a request
sends, batch first (-1): a text is one string per instance (not the model's internal [n, 1]
column), an image is uint8 pixels [n, height, width, channels].

A user's own model (tasks table and array) has the inputs its disttrain.json lists ("inputs": name,
per-example shape, numpy dtype), one or several (a dict of named inputs), numeric. Its output is what
the server answers, not the raw Keras output: a classifier's "probabilities" over the labels (its
head -- logits, one sigmoid unit -- turned into probabilities), a regression's "value", one float
per instance.

A typed table's model (typed_table.TableSpec) has one input per column, named as the column, of
shape [-1, 1] and the column's dtype: DT_STRING (BYTES) for a text column, DT_FLOAT (FP32) or
DT_INT64 (INT64) for the others.
"""

from dataclasses import dataclass

# Shared with the aggregator's SavedModel export (the server serves only SIGNATURE_NAME)
from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES, PREDICT_METHOD, SIGNATURE_NAME  # noqa: F401

# numpy dtype names (disttrain.json "inputs") -> TF DataType enum names (TF Serving's JSON) ->
# the Open Inference Protocol's datatypes.
TF_DTYPES = {
    "float16": "DT_HALF",
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "int8": "DT_INT8",
    "int16": "DT_INT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "uint8": "DT_UINT8",
    "uint16": "DT_UINT16",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
}
NUMPY_DTYPES = {tf_name: numpy_name for numpy_name, tf_name in TF_DTYPES.items()}
# A typed table's inputs (typed_table.DTYPES): its text columns are strings.
TYPED_DTYPES = {"string": "DT_STRING", "float32": TF_DTYPES["float32"], "int64": TF_DTYPES["int64"]}
V2_DATATYPES = {
    "DT_STRING": "BYTES",
    "DT_HALF": "FP16",
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
}
# A regression's output: one value per instance (TF Serving's Regress answers a float per example).
REGRESSION_OUTPUT = "value"


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a TF DataType enum name: DT_STRING, DT_UINT8, DT_FLOAT (own models: any of TF_DTYPES)
    shape: tuple  # -1 for the batch dimension (and for a size the model leaves open)
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

    @property
    def numpy_dtype(self):
        """The numpy dtype name of a numeric tensor ("float32", "int64", ...)."""
        return NUMPY_DTYPES[self.dtype]

    @property
    def example_shape(self):
        """The shape of one instance (the batch dimension left out); -1 where any size goes."""
        return tuple(self.shape[1:])

    def describe(self):
        """'FP32 [-1, 30]': how a message names what this input takes."""
        return f"{self.v2_datatype} {list(self.shape)}"


def input_tensors(loaded):
    """Every input a request sends, in the model's order: one for the built-in tasks."""
    if loaded.own_inputs:
        return [
            Tensor(
                item["name"],
                TYPED_DTYPES[item["dtype"]] if loaded.is_typed else TF_DTYPES[item["dtype"]],
                (-1, *(-1 if size is None else size for size in item["shape"])),
                f"serving_default_{item['name']}:0",
            )
            for item in loaded.inputs
        ]
    return [input_tensor(loaded)]


def input_tensor(loaded):
    """What a request sends: strings for a text model, uint8 pixels for an image or faces model
    (an own model's first input: see input_tensors)."""
    if loaded.own_inputs:
        return input_tensors(loaded)[0]
    name = INPUT_NAMES[loaded.task]
    spec = loaded.input_spec
    if spec["kind"] == "text":
        return Tensor(name, "DT_STRING", (-1,), f"serving_default_{name}:0")
    return Tensor(name, "DT_UINT8", (-1, spec["height"], spec["width"], spec["channels"]), f"serving_default_{name}:0")


def output_tensor(loaded):
    """Probabilities over the labels (classifiers) or the embedding (faces), float32, one row per
    instance; a regression's value, one float per instance."""
    if loaded.is_regression:
        return Tensor(REGRESSION_OUTPUT, "DT_FLOAT", (-1,), "StatefulPartitionedCall:0")
    width = loaded.meta["embedding_size"] if loaded.is_faces else len(loaded.labels)
    return Tensor(OUTPUT_NAMES.get(loaded.task, "probabilities"), "DT_FLOAT", (-1, width), "StatefulPartitionedCall:0")


def signature_def(loaded):
    """TF Serving's GetModelMetadataResponse.metadata["signature_def"] for the served model."""
    inputs, outputs = input_tensors(loaded), output_tensor(loaded)
    return {
        "signature_def": {
            SIGNATURE_NAME: {
                "inputs": {tensor.name: tensor.tf_serving() for tensor in inputs},
                "outputs": {outputs.name: outputs.tf_serving()},
                "method_name": PREDICT_METHOD,
            }
        }
    }
