"""The built-in keras.applications networks (--model mobilenetv2) as the trainer builds them: the artifact
takes the dataset's own images, the batch norms follow training quickly, and local SGD's re-estimation finds
them inside the nested backbone. Training them end to end is the time-to-accuracy benchmark's (minutes per
run); the re-estimation itself is tested with real workers on a small nested model file
(tests/integration/test_localsgd_diloco.py)."""

import numpy as np

from disttrain_trainer.models import build_image_model, find_layers


def test_mobilenetv2_takes_the_digits_own_shape_and_its_nested_batch_norms_are_found():
    import keras

    model = build_image_model(8, 8, 1, 10, architecture="mobilenetv2", image_size=32)
    assert model.input_shape == (None, 8, 8, 1) and model.output_shape == (None, 10)
    backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    norms = find_layers(model, keras.layers.BatchNormalization)
    assert (
        len(norms)
        == len([layer for layer in backbone.layers if isinstance(layer, keras.layers.BatchNormalization)])
        > 30
    )
    assert {norm.momentum for norm in norms} == {0.9}  # not keras.applications' 0.999: see models.build_application
    probabilities = model(np.zeros((2, 8, 8, 1), np.uint8), training=False).numpy()
    assert probabilities.shape == (2, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
