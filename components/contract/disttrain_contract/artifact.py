"""The model artifact: one self-contained `.keras` file.

A Keras v3 `.keras` file is a zip (config, weights, assets such as the
TextVectorization vocabulary). We add one member, `disttrain.json`, with what a
server or the aggregator needs to know without guessing: task, label names,
input spec, the initial-weights fingerprint and how the model was trained.
Keras ignores the extra member, so the file still loads anywhere.

Keras is imported lazily: the copier uses this package without TensorFlow.
"""

import hashlib
import json
import os
import zipfile

import numpy as np

from disttrain_contract.atomic import atomic_path
from disttrain_contract.errors import ContractError
from disttrain_contract.tensorflow_import import import_tensorflow

META_MEMBER = "disttrain.json"


def weights_fingerprint(weights):
    """sha256 over a list of arrays (shapes, dtypes and bytes, in order)."""
    digest = hashlib.sha256()
    for array in weights:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def save_model(model, path, meta):
    """Save `model` with `meta` atomically: readers see the old file or the new one."""
    with atomic_path(path) as tmp:
        tmp_keras = tmp + ".keras"  # Keras insists on the extension
        try:
            model.save(tmp_keras)
            with zipfile.ZipFile(tmp_keras, "a") as archive:
                archive.writestr(META_MEMBER, json.dumps(meta, indent=2, sort_keys=True))
            with open(tmp_keras, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp_keras, tmp)
        finally:
            if os.path.exists(tmp_keras):
                os.unlink(tmp_keras)


def read_meta(path):
    try:
        with zipfile.ZipFile(path) as archive:
            return json.loads(archive.read(META_MEMBER))
    except FileNotFoundError:
        raise ContractError(f"no model at {path}") from None
    except KeyError:
        raise ContractError(f"{path} is not a disttrain model (no {META_MEMBER} inside)") from None
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ContractError(f"{path} is not a readable model file: {err}") from None


def load_model(path):
    """Load a model artifact in Keras safe mode (no arbitrary code): (model, meta)."""
    meta = read_meta(path)
    import_tensorflow()  # quietly, before keras imports it (see tensorflow_import)
    import keras

    try:
        model = keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as err:  # Keras raises a zoo of types for a bad file
        raise ContractError(f"cannot load model {path}: {type(err).__name__}: {err}") from None
    return model, meta


def compile_as_saved(model, path):
    """Compile `model` as the `.keras` file at `path` was compiled: its loss, metrics and an optimizer of its
    config (class, learning rate or schedule, weight decay, clipping), deserialized in safe mode, so that a model
    published from the workers' files is the user's compiled model (`keras.models.load_model` then compiles it).

    The optimizer is not built: its state is not the workers' (each had its own; an average of moments means
    nothing), it starts over (a schedule from step 0), and the file does not carry zero-filled slots the size of
    the weights. Keras warns at such a file's load that it skips the optimizer's variables: that is this.
    Returns None (compiled, or the file was not compiled: nothing to do), or why `model` is left uncompiled (an
    unreadable configuration, an object Keras cannot rebuild in safe mode); never raises for the file's content."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json")).get("compile_config")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        return f"its compile configuration is unreadable ({type(err).__name__}: {err})"
    if not config:
        return None
    import_tensorflow()
    from keras.saving import deserialize_keras_object

    try:
        model.compile(**deserialize_keras_object(config, safe_mode=True))
    except Exception as err:  # what a config can make Keras raise is open-ended, as for load_model
        return f"Keras cannot rebuild its compile configuration ({type(err).__name__}: {err})"
    return None


def decode_image(data, height, width, channels):
    """Decode encoded image bytes (PNG, JPEG, ...) with OpenCV and resize.

    Returns uint8 [height, width, channels]. The copier (images:DIR) and the
    server call this same function, so training and serving see the same pixels."""
    import cv2

    flag = cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR
    return resize_image(imdecode(data, flag), height, width, channels)


def imdecode(data, flag):
    """cv2.imdecode that raises ContractError for anything it cannot decode
    (corrupt data, an unknown format, more pixels than OPENCV_IO_MAX_IMAGE_PIXELS)."""
    import cv2

    buffer = np.frombuffer(data, dtype=np.uint8)
    try:
        image = cv2.imdecode(buffer, flag) if buffer.size else None
    except cv2.error as err:
        if "MAX_IMAGE_PIXELS" in str(err):
            raise ContractError(
                "not a decodable image: it has more pixels than the limit (OPENCV_IO_MAX_IMAGE_PIXELS)"
            ) from None
        raise ContractError(f"not a decodable image: {str(err).strip().splitlines()[-1]}") from None
    if image is None:
        raise ContractError("not a decodable image (corrupt or unsupported format)")
    return image


def resize_image(image, height, width, channels):
    import cv2

    if channels == 3 and image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if image.shape[:2] != (height, width):
        shrinking = image.shape[0] > height or image.shape[1] > width
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    return image.reshape(height, width, channels).astype(np.uint8)


def decode_image_graph(data, height, width, channels):
    """`decode_image` as TensorFlow ops, for the image SavedModel's encoded-image signature: a batch
    of encoded files (tf.string [n]) -> uint8 [n, height, width, channels]. tf.io.decode_image (PNG,
    JPEG, GIF's first frame, BMP) instead of OpenCV, and tf.image.resize with OpenCV's choice of
    method (area when shrinking, bilinear otherwise). The same pixels as OpenCV for an image already
    of the model's size in a lossless format; otherwise close, not equal (other JPEG decoder and
    resize arithmetic: tests/integration/test_exports_savedmodel.py measures the difference)."""
    import tensorflow as tf

    def decode(one):
        image = tf.io.decode_image(one, channels=channels, expand_animations=False, dtype=tf.uint8)
        size = tf.shape(image)[:2]
        same = tf.reduce_all(tf.equal(size, [height, width]))
        shrinking = tf.logical_or(size[0] > height, size[1] > width)

        def resize(method):
            resized = tf.image.resize(image, [height, width], method=method)
            return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)

        out = tf.cond(
            same, lambda: image, lambda: tf.cond(shrinking, lambda: resize("area"), lambda: resize("bilinear"))
        )
        return tf.ensure_shape(out, [height, width, channels])

    return tf.map_fn(decode, data, fn_output_signature=tf.TensorSpec([height, width, channels], tf.uint8))
