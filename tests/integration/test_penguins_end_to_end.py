"""The Palmer penguins table as it comes (text columns island and sex, 11 rows with NA) through the four real
stages: the copier makes it a typed table, 2 `average` workers train the built-in model behind the preprocessing
block, the aggregator publishes it (68 held-out penguins: one is 1.5 points, hence the gate's 3-point allowance against
the best worker), and the server answers raw rows, with strings and nulls, with what the
published model itself answers for them; a value the model cannot take is a 400 naming the column."""

import json
import os

import numpy as np
import pytest

from server.serving import http, predict_url, running_server
from stages import run_pipeline

pytestmark = pytest.mark.slow

PENGUINS = os.path.join(os.path.dirname(__import__("palmerpenguins").__file__), "data", "penguins.csv")
ROWS = [
    {
        "island": "Biscoe",
        "bill_length_mm": 48.0,
        "bill_depth_mm": 15.0,
        "flipper_length_mm": 220,
        "body_mass_g": 5200,
        "sex": None,
        "year": 2008,
    },
    {
        "island": "Dream",
        "bill_length_mm": None,
        "bill_depth_mm": 18.0,
        "flipper_length_mm": 190,
        "body_mass_g": 3700,
        "sex": "female",
        "year": 2008,
    },
    {
        "island": "Torgersen",
        "bill_length_mm": 39.1,
        "bill_depth_mm": 18.7,
        "flipper_length_mm": 181,
        "body_mass_g": 3750,
        "sex": "male",
        "year": 2007,
    },
]


def test_penguins_train_publish_and_answer_raw_rows(tmp_path):
    import keras
    import tensorflow as tf

    from disttrain_contract.typed_table import TableSpec, column_array

    report = run_pipeline(
        tmp_path,
        f"table:{PENGUINS}",
        2,
        epochs=30,
        copier_args=("--label-column", "species"),
        aggregator_args=("--max-drop-vs-best-worker", 3),
    )
    manifest = json.load(open(tmp_path / "data" / "manifest.json"))
    assert manifest["task"] == "typed_table" and manifest["labels"] == ["Adelie", "Chinstrap", "Gentoo"]
    spec = TableSpec.from_json(manifest["input"])
    assert spec.column("island").type == "string" and spec.column("sex").missing > 0
    # 68 held-out penguins: the species are told apart by the bills and flippers (majority class 0.41)
    assert report["final"]["test_accuracy"] >= 0.9, report["final"]

    model = keras.saving.load_model(tmp_path / "final" / "model.keras")
    columns = {c.name: column_array(c, [row[c.name] for row in ROWS]) for c in spec.columns}
    own = np.asarray(
        model({name: tf.constant(v.astype(str) if v.dtype == object else v) for name, v in columns.items()})
    )
    with running_server(tmp_path) as (base, _, _):
        status, body = http("POST", base + predict_url(), {"instances": ROWS})
        assert status == 200, body
        np.testing.assert_allclose(np.asarray(body["predictions"]), own, atol=1e-5)
        assert np.argmax(own, axis=1).tolist()[2] == 0  # the Torgersen male of the table's first row: an Adelie
        status, body = http("POST", base + predict_url(), {"instances": [dict(ROWS[0], body_mass_g="heavy")]})
        assert status == 400 and "body_mass_g" in body["error"], body
