"""The tasks (the kinds of input a dataset holds), one object each: every fact about a task that
more than one stage, or more than one place, branches on. The stages look a task up here
(`task_of(manifest)`, `TASKS[name]`) and read its facts instead of comparing its name; a new task
is one more entry.

    task   kind   storage  served input (dtype)  output         evaluation  split by  vocabulary
    text   text   jsonl    text (string [n])     probabilities  prediction  example   yes
    image  image  npy      image (uint8)         probabilities  prediction  example   -   + serving_bytes
    faces  image  npy      face (uint8 crops)    embedding      retrieval   person    -   face preprocessing
    table  table  npy      the model's own inputs               prediction  example   -   feature columns
    array  array  npy      the model's own inputs               prediction  example   -
    typed_table table parquet the table's columns, raw          prediction  example   -   typed columns

What a model's problem decides (classification or regression: the metric, the head) is the
manifest's `problem` and metrics.primary_metric, not a task's.

Importing this module imports neither TensorFlow nor OpenCV (the copier reads the contract without
TensorFlow); `Task.preprocess` imports the faces module when a faces task calls it.
"""

import dataclasses

import numpy as np

from disttrain_contract.registry import entry_of

PROBLEMS = ("classification", "regression")


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    # the manifest input's "kind" and the copier's --schema "input".kind: text, image (faces too), table, array
    kind: str
    # manifest.split_files: "jsonl" (one {"text", "label"} object per line), "npy" (NAME.x.npy, NAME.y.npy) or
    # "parquet" (NAME.parquet, the typed columns; NAME.y.npy)
    storage: str
    # the built-in model's served input (serving.INPUT_NAMES) and its dtype; None: the model's own inputs
    # (its disttrain.json `inputs`), whatever its source
    input_name: str = None
    input_dtype: str = None  # "string": the model takes a [n, 1] column, its signatures a flat [n]; "uint8": pixels
    # the built-in model's served output (serving.OUTPUT_NAMES); None: the model's own (numeric tasks)
    output_name: str = None
    # x is stored in its own dtype and shape (not as uint8 pixels), with per-feature statistics in the
    # manifest's input for a model's Normalization (manifest.NUMERIC_TASKS)
    numeric: bool = False
    # evaluation is retrieval over held-out people, the output an L2-normalised embedding compared by
    # distance (evaluation.evaluate_retrieval, metrics.TOP1); else the output is read through the head
    retrieval: bool = False
    # the copier splits by label (a person's photos all go to one split), not by example; a shard's
    # labels then differ from the others' by design (no label-skew or missing-class check)
    split_by_person: bool = False
    # the inputs are strings the copier tokenizes (manifest.tokenize) into the manifest's vocabulary,
    # which the built-in model's vectorizer holds; the analysis slices them by length in tokens
    vocabulary: bool = False
    # the model takes face crops through its own face preprocessing (faces.preprocess; the exports
    # run it in the graph: faces.preprocess_graph)
    face_preprocessing: bool = False
    # a second export signature on encoded image files (serving.BYTES_SIGNATURE_NAME)
    bytes_signature: bool = False
    # a multi-input model's named inputs are the dataset's feature columns (manifest input "features")
    feature_inputs: bool = False
    # the problems a dataset of this task may be (manifest.PROBLEMS)
    problems: tuple = PROBLEMS
    # the user's own model (--model-file, --model-module) trains on it (faces: triplet mining of the built-in)
    own_models: bool = True
    # --strategy parameterserver trains it (faces: its in-batch triplet mining needs whole batches)
    parameter_server: bool = True

    def model_input(self, x):
        """A split's x (manifest.read_split) as the model takes it: a text model a [n, 1] column of
        strings; arrays pass as they are."""
        if self.input_dtype == "string":
            return np.asarray(x, dtype=object).reshape(-1, 1)
        return x

    def preprocess(self, x, meta):
        """Model inputs as the Keras model itself is called on them: a faces model's crops through the
        face preprocessing its disttrain.json (`meta`) names; every other task's as they are."""
        if not self.face_preprocessing:
            return x
        from disttrain_contract.faces import preprocess, preprocessing_of

        return preprocess(x, preprocessing_of(meta))

    def describe_input(self, spec):
        """A few words on a manifest's input for a log line ("" when the task says it all)."""
        if self.feature_inputs:
            return f"{len(spec['features'])} features"
        if self.numeric:
            return f"x {spec['dtype']} {spec['shape']} per example"
        return ""


TASKS = {
    task.name: task
    for task in (
        Task(
            "text",
            kind="text",
            storage="jsonl",
            input_name="text",
            input_dtype="string",
            output_name="probabilities",
            vocabulary=True,
        ),
        Task(
            "image",
            kind="image",
            storage="npy",
            input_name="image",
            input_dtype="uint8",
            output_name="probabilities",
            bytes_signature=True,
        ),
        Task(
            "faces",
            kind="image",
            storage="npy",
            input_name="face",
            input_dtype="uint8",
            output_name="embedding",
            retrieval=True,
            split_by_person=True,
            face_preprocessing=True,
            problems=("classification",),
            own_models=False,
            parameter_server=False,
        ),
        Task("table", kind="table", storage="npy", numeric=True, feature_inputs=True),
        Task("array", kind="array", storage="npy", numeric=True),
        # a table with text, booleans or missing values, stored raw (typed_table.py); the model takes its
        # columns by name, through its own lookups or disttrain's preprocessing block
        Task("typed_table", kind="table", storage="parquet", feature_inputs=True),
    )
}


def task_of(manifest_or_name):
    """The Task of a manifest (anything with a .task), a report or disttrain.json dict (its "task"),
    or a task's name. KeyError for an unknown one (Manifest.read refuses those first)."""
    return entry_of(TASKS, "task", manifest_or_name)
