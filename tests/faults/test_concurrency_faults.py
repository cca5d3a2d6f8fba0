"""10,000 concurrent identical requests per endpoint (16 at a time: 2 gunicorn workers x 8 threads), every
answer equal to the serial one: issue 16's goal. The same checks as tests/server/test_server_concurrency.py
(which sends 320 per endpoint in `make test`); here each enrolment is deleted again so the gallery stays small.

Both run under `make test-load` (load, no fault injected), which CI does not run: together about 10 minutes on a
slow 2-core host, for the same checks `make test` makes with 320 requests per endpoint (docs/development.md)."""

import pytest

from server.serving import faces_model, sample_model, worker_model
from server.test_server_concurrency import serve_faces, serve_text_and_images

TOTAL = 10_000


@pytest.mark.load
def test_ten_thousand_concurrent_predicts_and_metadata(tmp_path_factory, tmp_path):
    import numpy as np

    digits = sample_model(tmp_path_factory, "sample:digits")
    digits_test = np.load(digits / "data" / "test.x.npy"), np.load(digits / "data" / "test.y.npy")
    text = worker_model(sample_model(tmp_path_factory, "sample:movie-reviews"))
    serve_text_and_images(text, worker_model(digits), digits_test, tmp_path, TOTAL)


@pytest.mark.load
def test_ten_thousand_concurrent_searches_metadata_and_enrolments(tmp_path_factory, tmp_path):
    serve_faces(faces_model(tmp_path_factory), tmp_path, TOTAL, delete_enrolments=True)
