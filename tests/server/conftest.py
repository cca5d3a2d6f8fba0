"""Session-wide real models for the server tests: trained once (~10 s each), shared by every test."""

import numpy as np
import pytest

from disttrain_contract.artifact import load_model, save_model
from server import own_models
from server.serving import faces_model, make_client, sample_model, worker_model


@pytest.fixture(scope="session")
def text_model(tmp_path_factory):
    return worker_model(sample_model(tmp_path_factory, "sample:movie-reviews"))


@pytest.fixture(scope="session")
def digits_root(tmp_path_factory):
    return sample_model(tmp_path_factory, "sample:digits")


@pytest.fixture(scope="session")
def image_model(digits_root):
    return worker_model(digits_root)


@pytest.fixture(scope="session")
def digits_test(digits_root):
    """The held-out digit images (uint8 [n, 8, 8, 1]) and their labels."""
    return np.load(digits_root / "data" / "test.x.npy"), np.load(digits_root / "data" / "test.y.npy")


@pytest.fixture(scope="session")
def flipped_text_model(text_model, tmp_path_factory):
    """The text model with its two output units swapped: a different model that calls every review the opposite."""
    model, meta = load_model(text_model)
    # The published text model is the vectorizer in front of a nested core model that owns the output layer.
    core = model.get_layer("text_embedding_bag")
    output = core.get_layer("probabilities")
    output.set_weights([w[..., ::-1] for w in output.get_weights()])
    path = str(tmp_path_factory.mktemp("flipped") / "model.keras")
    save_model(model, path, meta)
    return path


@pytest.fixture(scope="session")
def text_client(text_model, tmp_path_factory):
    return make_client(text_model, tmp_path_factory.mktemp("text-workdir"))


@pytest.fixture(scope="session")
def image_client(image_model, tmp_path_factory):
    return make_client(image_model, tmp_path_factory.mktemp("image-workdir"))


@pytest.fixture
def empty_client(tmp_path):
    """A server whose model has not been published yet."""
    return make_client(None, tmp_path)


@pytest.fixture(scope="session")
def face_model(tmp_path_factory):
    return faces_model(tmp_path_factory)


@pytest.fixture(scope="session")
def other_face_model(face_model, tmp_path_factory):
    """The face model with noise on its embedding layer: a new version whose distances differ."""
    model, meta = load_model(face_model)
    layer = model.get_layer("embedding")
    rng = np.random.default_rng(0)
    layer.set_weights([w + rng.normal(0, 0.5 * w.std(), w.shape).astype(w.dtype) for w in layer.get_weights()])
    path = str(tmp_path_factory.mktemp("other-faces") / "model.keras")
    save_model(model, path, meta)
    return path


# A user's own models (tables, arrays, several inputs), published with their data (server.own_models).
@pytest.fixture(scope="session")
def cancer_root(tmp_path_factory):
    return own_models.cancer(tmp_path_factory)


@pytest.fixture(scope="session")
def diabetes_root(tmp_path_factory):
    return own_models.diabetes(tmp_path_factory)


@pytest.fixture(scope="session")
def two_inputs_root(tmp_path_factory):
    return own_models.two_inputs(tmp_path_factory)


@pytest.fixture(scope="session")
def counts_root(tmp_path_factory):
    return own_models.counts(tmp_path_factory)


def own_client(root):
    """A test client serving the model in root/final, with root as its workdir (the page reads root/data)."""
    from disttrain_server import create_app

    app = create_app(
        {"MODEL_PATH": str(root / "final" / "model.keras"), "GALLERY_DIR": str(root / "gallery"), "TESTING": True}
    )
    return app.test_client()


@pytest.fixture(scope="session")
def cancer_client(cancer_root):
    return own_client(cancer_root)


@pytest.fixture(scope="session")
def diabetes_client(diabetes_root):
    return own_client(diabetes_root)


@pytest.fixture(scope="session")
def two_inputs_client(two_inputs_root):
    return own_client(two_inputs_root)


@pytest.fixture(scope="session")
def counts_client(counts_root):
    return own_client(counts_root)
