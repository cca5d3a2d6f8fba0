"""typed_table: a table of typed columns (typed_table.py of the contract: numbers, integers, booleans, text,
missing values) -> disttrain's preprocessing block (preprocessing.py: standardised numbers with missing
indicators, one-hot text) -> table's MLP. The built-in model for a typed table when the user brings none.

As for a user's one-vector model (tasks/typed.py): the block is applied to the shard once and the MLP trains on
its vectors; the published model is the block and the MLP, raw columns in."""

import keras

from disttrain_contract.typed_table import TableSpec, encoded_width
from disttrain_trainer import preprocessing
from disttrain_trainer.tasks import table, typed


class Task(table.Task):
    name = "typed_table"

    def __init__(self, manifest, config):
        super().__init__(manifest, config)
        self.table = TableSpec.from_json(manifest.input)

    def check_flags(self, config):
        super().check_flags(config)
        typed.check_flags(config, raw=False)

    def build(self):
        inputs = keras.Input(shape=(encoded_width(self.table),), dtype="float32", name=preprocessing.VECTOR)
        return self.mlp(inputs, inputs, private=False)  # (the block standardised the columns already)

    def prepare(self, data_dir, x_train):
        return typed.training_input(x_train, self.table, None)

    def model_input(self, x):
        return typed.published_input(x, self.table, None)

    def publish(self, model):
        return preprocessing.with_block(self.table, model)

    def metadata(self, published):
        return {**super().metadata(published), "preprocessing": typed.preprocessing_meta(self.table, None)}

    def describe(self):
        width = encoded_width(self.table)
        return f"{self.manifest.task} ({len(self.table.columns)} columns, the preprocessing block's {width} values)"
