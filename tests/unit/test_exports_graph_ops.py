"""The TensorFlow versions of the server's OpenCV steps that the exported SavedModel runs in its graph:
faces.preprocess_graph (cv2.equalizeHist) must give exactly OpenCV's pixels; artifact.decode_image_graph
(tf.io.decode_image + tf.image.resize) gives OpenCV's pixels for lossless files of the model's size and
close ones otherwise (measured and bounded here; the README quotes the numbers)."""

import cv2
import numpy as np
import pytest

from disttrain_contract.artifact import decode_image, decode_image_graph
from disttrain_contract.faces import FACE_SIZE, find_face, preprocess, preprocess_graph


def crops():
    """Crops that exercise equalizeHist's cases: full range, narrow ranges, two levels, one level
    (left as it is), a single dark outlier; and a real face crop."""
    from skimage.data import astronaut

    rng = np.random.default_rng(7)
    shape = (FACE_SIZE, FACE_SIZE, 1)
    out = [
        rng.integers(0, 256, shape),
        rng.integers(100, 140, shape),
        rng.integers(0, 8, shape),
        rng.choice([30, 200], shape),
        np.full(shape, 77),
        np.full(shape, 0),
        np.full(shape, 255),
    ]
    outlier = rng.integers(180, 256, shape)
    outlier[0, 0, 0] = 3
    out.append(outlier)
    # smooth gradients (many levels with equal counts: rounding ties matter)
    out.append(np.tile(np.arange(FACE_SIZE, dtype=np.int64)[None, :, None] * 8, (FACE_SIZE, 1, 1)))
    out.append(find_face(astronaut()[..., ::-1].copy()).crop)
    out += list(rng.integers(0, 256, (40, *shape)) // rng.integers(1, 40, (40, 1, 1, 1)))
    return np.stack([np.asarray(c, dtype=np.uint8) for c in out])


def test_preprocess_graph_equals_opencv_equalize_hist():
    import tensorflow as tf

    batch = crops()
    expected = preprocess(batch, 2)
    got = preprocess_graph(tf.constant(batch), 2).numpy()
    assert got.dtype == np.uint8 and got.shape == batch.shape
    differ = [i for i in range(len(batch)) if not np.array_equal(got[i], expected[i])]
    assert not differ, (
        f"crops {differ} differ from cv2.equalizeHist, by up to {np.abs(got.astype(int) - expected).max()}"
    )
    np.testing.assert_array_equal(preprocess_graph(tf.constant(batch), 1).numpy(), batch)  # version 1: as cut out
    assert preprocess_graph(tf.zeros([0, FACE_SIZE, FACE_SIZE, 1], tf.uint8), 2).shape == (0, FACE_SIZE, FACE_SIZE, 1)


def encode(image, ext, **params):
    flags = [cv2.IMWRITE_JPEG_QUALITY, params["quality"]] if "quality" in params else []
    ok, data = cv2.imencode(ext, image[..., ::-1] if image.ndim == 3 and image.shape[2] == 3 else image, flags)
    assert ok
    return data.tobytes()


def images(channels, size, n=24):
    """Smooth random images (blurred noise: like photos, unlike white noise), uint8 [n, size, size, channels]."""
    rng = np.random.default_rng(channels)
    noise = rng.integers(0, 256, (n, size, size, channels)).astype(np.float32)
    return (
        np.stack([cv2.GaussianBlur(img, (5, 5), 1.5).reshape(size, size, channels) for img in noise])
        .round()
        .astype(np.uint8)
    )


def decode_both(files, size, channels):
    import tensorflow as tf

    ours = np.stack([decode_image(data, size, size, channels) for data in files])
    graph = decode_image_graph(tf.constant(files, dtype=tf.string), size, size, channels).numpy()
    assert graph.shape == ours.shape and graph.dtype == np.uint8
    return ours.astype(int), graph.astype(int)


@pytest.mark.parametrize("channels,size", [(1, 8), (3, 32)])
def test_decode_graph_equals_opencv_for_lossless_files_of_the_models_size(channels, size):
    batch = images(channels, size)
    ours, graph = decode_both([encode(image, ".png") for image in batch], size, channels)
    np.testing.assert_array_equal(ours, batch)
    np.testing.assert_array_equal(graph, batch)


# (what, file maker, mean and max absolute pixel difference allowed)
RESIZED = {
    # measured: 3x shrink 0 (equal), bilinear enlarge mean 0.09, max 1 (OpenCV's fixed-point arithmetic)
    "PNG 3x larger (area shrink)": (
        lambda image: encode(cv2.resize(image, None, fx=3, fy=3, interpolation=cv2.INTER_CUBIC), ".png"),
        0.6,
        2,
    ),
    "PNG half size (bilinear enlarge)": (
        lambda image: encode(cv2.resize(image, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA), ".png"),
        0.6,
        2,
    ),
    # two JPEG decoders (IDCT, chroma upsampling): measured mean 0.51 (gray) and 1.01 (colour), max 2 and 4
    "JPEG quality 90, same size": (lambda image: encode(image, ".jpg", quality=90), 1.5, 8),
}


@pytest.mark.parametrize("what", list(RESIZED))
@pytest.mark.parametrize("channels,size", [(1, 8), (3, 32)])
def test_decode_graph_is_close_to_opencv_otherwise(what, channels, size):
    make, mean_bound, max_bound = RESIZED[what]
    batch = images(channels, size)
    ours, graph = decode_both([make(image if channels == 3 else image[..., 0]) for image in batch], size, channels)
    difference = np.abs(ours - graph)
    print(
        f"{what}, {size}x{size}x{channels}: OpenCV vs tf.io decode+resize: mean {difference.mean():.3f}, "
        f"max {difference.max()}, {np.mean(difference > 0):.1%} of the pixels differ"
    )
    assert difference.mean() <= mean_bound and difference.max() <= max_bound
