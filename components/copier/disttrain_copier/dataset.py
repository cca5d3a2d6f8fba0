"""What a source gives the copier: a Dataset (its task, labels, input description and a stream of examples),
whichever reader made it (sources.py, tables.py)."""

import dataclasses
from typing import Callable, Iterator, Optional


@dataclasses.dataclass
class Dataset:
    task: str  # "text" | "image" | "faces" | "table" | "array" | "typed_table"
    labels: list
    input: dict
    examples: Optional[int]
    stream: Callable[[], Iterator[tuple]]
    skipped: list = dataclasses.field(default_factory=list)  # (file, reason) of inputs left out
    example_labels: Optional[list] = None  # faces: every example's label, known before streaming
    known_duplicates: Optional[str] = None  # why a built-in sample's train/test duplicates are accepted (a warning)
    source_dtype: Optional[str] = None  # the inputs' dtype before the copier stores them (npz: x's); None: as stored
    problem: str = "classification"  # or "regression": labels is [] and y holds float targets
    target: Optional[str] = None  # regression: the target's name (a table's label column; npz: "y")
    release: Optional[Callable[[], None]] = None  # removes what reading the source left behind (a spooled object)
    # a table: (x, y) batches instead of single examples (the copier then has no per-example loop): x float32
    # [m, features] (task table) or a pyarrow RecordBatch of the typed columns (typed_table); y [m]
    batches: Optional[Callable[[], Iterator[tuple]]] = None
    table: Optional[object] = None  # a table's tables.TableInfo: column types, missing cells, options

    def close(self):
        if self.release is not None:
            self.release()
            self.release = None
