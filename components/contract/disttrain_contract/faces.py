"""Faces: detection, cropping, lighting normalisation and augmentation, shared by
the copier, the trainer, the aggregator and the server so that training and
serving see faces cut out and normalised the same way.

Detection uses OpenCV's Haar cascades (`haarcascade_frontalface_default.xml`
for faces, `haarcascade_eye.xml` to confirm them; shipped by
opencv-python-headless 4.x under cv2.data.haarcascades; OpenCV 5 wheels have
neither the cascades nor CascadeClassifier).

Choosing among several boxes: the face cascade also fires on textures (a
patterned shirt, stripes), and such a box can be the largest in the photo. So
the boxes are ranked by how face-like they are, not by size: first by the eyes
the eye cascade finds in the box's upper half (0, 1, 2 or more), then by the face
cascade's confidence (detectMultiScale3's level weight: the score of its last
stage, higher is more face-like; about 4-8 for the faces of the tests' photos,
under 1 for the striped-shirt false positive of tests/unit/test_faces_distractors.py).

Preprocessing is versioned (FACE_PREPROCESSING, recorded in a faces model's
disttrain.json as "face_preprocessing"): a model is always fed crops prepared
the way it was trained on, so an old model keeps its old preprocessing.
    1  the 32x32 grayscale crop as cut out (models without the field)
    2  1 + histogram equalisation of the crop (cv2.equalizeHist): a darker or flatter
       photo of a face gives about the same crop. Measured on the held-out sample people's
       portraits (tests' server.face_photos.portrait), mean absolute pixel difference between
       a crop and its 0.7x-darker copy's: raw 35.2, CLAHE (clip 2, 4x4 tiles) 16.8,
       equalisation 2.7; between different people 50.5, 58.3, 68.6: equalisation keeps
       people apart and makes darker copies alike, CLAHE's clipping does not undo a darker photo
"""

import threading
from typing import NamedTuple

import numpy as np

from disttrain_contract.errors import ContractError

FACE_SIZE = 32  # face crops are FACE_SIZE x FACE_SIZE grayscale
FACE_MARGIN = 0.1  # extra border around the detector's box, as a fraction of its size
FACE_PREPROCESSING = 2  # what the trainer trains new models with (see the module docstring)
PREPROCESSING_VERSIONS = (1, 2)


class NoFaceFound(ContractError):
    """The image holds no face the detector can find."""


class FoundFace(NamedTuple):
    """The face chosen in a photo: its crop (as cut out, before preprocessing), its box
    (x, y, w, h), the face cascade's confidence, the eyes found in it, and how many
    candidate boxes the photo had."""

    crop: np.ndarray
    box: tuple
    confidence: float
    eyes: int
    found: int


# One cascade of each kind per thread, never shared: CascadeClassifier.detectMultiScale keeps
# per-call working buffers in the object, so two threads in one cascade get wrong
# boxes or none (opencv/opencv#4287; tests/unit/test_faces_threads.py failed 5 of 5
# runs with a shared one). The server calls this from every request thread
# (gunicorn --threads). A lock would also be correct, but it serialises detection,
# most of a :search request's CPU time, to one core per process; a cascade costs
# about 10 ms and 1 MB to load once per thread (bench/README.md "Face search").
_per_thread = threading.local()


def _cascade():
    cascade = getattr(_per_thread, "cascade", None)
    if cascade is None:
        cascade = _per_thread.cascade = _load_cascade()
    return cascade


def _eye_cascade():
    cascade = getattr(_per_thread, "eye_cascade", None)
    if cascade is None:
        cascade = _per_thread.eye_cascade = _load_cascade("haarcascade_eye.xml")
    return cascade


def _load_cascade(name="haarcascade_frontalface_default.xml"):
    import cv2

    if not hasattr(cv2, "CascadeClassifier") or not hasattr(cv2, "data"):
        raise ContractError("this OpenCV build has no Haar cascades (OpenCV 5?); install opencv-python-headless 4.x")
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + name)
    if cascade.empty():
        raise ContractError(f"could not load OpenCV's {name}")
    return cascade


def to_gray(image):
    import cv2

    if image.ndim == 3 and image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    if image.ndim == 3:
        return image[..., 0]
    return image


class Candidate(NamedTuple):
    box: tuple  # (x, y, w, h)
    confidence: float  # the face cascade's level weight
    eyes: int  # eyes found in the box's upper half


def count_eyes(gray, box):
    """Eyes the eye cascade finds where a face's eyes are: the band from 1/8 to 5/8 of the
    box's height, each eye 1/10 to 1/3 of the box wide."""
    x, y, w, h = box
    band = gray[y + h // 8 : y + h * 5 // 8, x : x + w]
    eyes = _eye_cascade().detectMultiScale(
        band, scaleFactor=1.1, minNeighbors=3, minSize=(max(1, w // 10),) * 2, maxSize=(max(2, w // 3),) * 2
    )
    return len(eyes)


def detect_faces(image):
    """Face candidates in a BGR or grayscale uint8 image, the most face-like first:
    more eyes found, then higher cascade confidence, then larger (see the module docstring)."""
    import cv2

    gray = cv2.equalizeHist(to_gray(image))
    smallest = max(24, min(gray.shape[:2]) // 10)
    boxes, _, weights = _cascade().detectMultiScale3(
        gray, scaleFactor=1.1, minNeighbors=4, minSize=(smallest, smallest), outputRejectLevels=True
    )
    candidates = []
    for box, weight in zip(boxes if len(boxes) else [], np.ravel(weights) if len(boxes) else []):
        box = tuple(int(v) for v in box)
        candidates.append(Candidate(box, round(float(weight), 3), count_eyes(gray, box)))
    return sorted(candidates, key=lambda c: (min(c.eyes, 2), c.confidence, c.box[2] * c.box[3]), reverse=True)


def crop_face(image, box, size=FACE_SIZE, margin=FACE_MARGIN):
    """The box plus a margin, clipped to the image, as a size x size grayscale crop."""
    import cv2

    gray = to_gray(image)
    x, y, w, h = box
    dx, dy = int(w * margin), int(h * margin)
    top, left = max(0, y - dy), max(0, x - dx)
    bottom, right = min(gray.shape[0], y + h + dy), min(gray.shape[1], x + w + dx)
    crop = cv2.resize(gray[top:bottom, left:right], (size, size), interpolation=cv2.INTER_AREA)
    return crop.reshape(size, size, 1)


def find_face(image, size=FACE_SIZE):
    """The most face-like face in the photo as a FoundFace; NoFaceFound if there is none."""
    candidates = detect_faces(image)
    if not candidates:
        raise NoFaceFound("no face found in the image")
    best = candidates[0]
    return FoundFace(crop_face(image, best.box, size), best.box, best.confidence, best.eyes, len(candidates))


def decode_photo(data):
    """Encoded image bytes -> BGR uint8 array (ContractError if it is not an image)."""
    import cv2

    from disttrain_contract.artifact import imdecode

    return imdecode(data, cv2.IMREAD_COLOR)


# ------------------------------------------------------------- preprocessing


def preprocessing_of(meta):
    """The preprocessing version a faces model was trained with: 1 when its disttrain.json
    predates the field; ContractError for a version this code does not know."""
    version = meta.get("face_preprocessing", 1)
    if isinstance(version, bool) or version not in PREPROCESSING_VERSIONS:
        raise ContractError(
            f"face_preprocessing {version!r} is not one of {PREPROCESSING_VERSIONS}: the model needs a newer disttrain"
        )
    return version


def preprocess(crops, version):
    """Crops [n, size, size, 1] (or one [size, size, 1]) as the model of that preprocessing
    version takes them. Called on every crop the model sees: training views (after
    augmentation), evaluation, the gallery's and the search's crops (LoadedModel.predict).
    Pure function of its input: safe from any number of request threads."""
    import cv2

    if version == 1:
        return crops
    if version != 2:
        raise ContractError(f"face_preprocessing {version!r} is not one of {PREPROCESSING_VERSIONS}")
    batch = np.asarray(crops, dtype=np.uint8)
    flat = batch.reshape(-1, *batch.shape[-3:])
    if not len(flat):
        return batch
    out = np.stack([cv2.equalizeHist(np.ascontiguousarray(c[..., 0]))[..., None] for c in flat])
    return out.reshape(batch.shape)


def preprocess_graph(crops, version):
    """`preprocess` as TensorFlow ops, for the aggregator's SavedModel and TFLite exports, whose
    serving graph takes the raw crops the server's API takes: uint8 [n, size, size, 1] in, the same
    shape out. Version 2 computes exactly what cv2.equalizeHist computes per crop (tests/integration/
    test_exports_savedmodel.py: equal on every held-out crop): the histogram h, its running sum c, and
    for every level v >= the darkest level d, lut[v] = round((c[v] - h[d]) * (255 / (n - h[d]))) in
    float32, rounded half to even (OpenCV's saturate_cast); a crop of one level keeps it. Only ops
    TFLite has as builtins (unsorted segment sum, cumsum, gather), and memory in proportion to the
    pixels: not a one-hot [n, pixels, 256] comparison."""
    import tensorflow as tf

    if version == 1:
        return crops
    if version != 2:
        raise ContractError(f"face_preprocessing {version!r} is not one of {PREPROCESSING_VERSIONS}")
    shape = tf.shape(crops)
    n = shape[0]
    flat = tf.reshape(tf.cast(crops, tf.int32), [n, -1])  # [n, pixels]
    pixels = tf.cast(tf.shape(flat)[1], tf.float32)
    ids = flat + tf.range(n)[:, None] * 256  # one histogram per crop
    hist = tf.reshape(tf.math.unsorted_segment_sum(tf.ones_like(flat, tf.float32), ids, n * 256), [n, 256])
    cumulative = tf.cumsum(hist, axis=1)
    darkest = tf.reduce_min(tf.where(hist > 0, cumulative, pixels), axis=1, keepdims=True)  # h[d] = c[d]
    scale = 255.0 / tf.maximum(pixels - darkest, 1.0)
    lut = tf.clip_by_value(tf.round((cumulative - darkest) * scale), 0.0, 255.0)
    equalised = tf.gather(tf.reshape(lut, [-1]), ids)
    one_level = tf.equal(darkest, pixels)  # [n, 1]: cv2.equalizeHist leaves such a crop as it is
    out = tf.where(one_level, tf.cast(flat, tf.float32), equalised)
    return tf.reshape(tf.cast(out, tf.uint8), shape)


# -------------------------------------------------------------- augmentation

# Ranges of real uploads (phone photos 0.7x darker or brighter, a few degrees
# of tilt, 1/3 size): every training view draws its brightness, contrast, rotation and
# scale from them, and is then preprocessed like a served crop.
ROTATION_DEGREES = 10
SCALE_RANGE = (0.88, 1.12)
SHIFT_FRACTION = 0.08
BRIGHTNESS_FACTOR = (0.55, 1.35)  # multiplies the pixels (a darker or brighter exposure)
CONTRAST_RANGE = (0.7, 1.3)  # around the crop's mean
LOW_RESOLUTION = (0.25, 1.0)  # down to this fraction of the crop's size and back up (a smaller photo)
LOW_RESOLUTION_CHANCE = 0.3


def augment(face, rng):
    """A random view of a face crop: shift/zoom crop, rotation, a smaller photo's blur,
    brightness and contrast, horizontal flip. The positives of self-supervised triplets,
    and the held-out queries of the retrieval evaluation (with a seeded rng)."""
    import cv2

    size = face.shape[0]
    image = face.reshape(size, size).astype(np.float32)
    angle = rng.uniform(-ROTATION_DEGREES, ROTATION_DEGREES)
    scale = rng.uniform(*SCALE_RANGE)
    shift = rng.uniform(-SHIFT_FRACTION, SHIFT_FRACTION, size=2) * size
    matrix = cv2.getRotationMatrix2D((size / 2, size / 2), angle, scale)
    matrix[:, 2] += shift
    image = cv2.warpAffine(image, matrix, (size, size), borderMode=cv2.BORDER_REFLECT)
    if rng.random() < LOW_RESOLUTION_CHANCE:
        small = max(4, int(round(size * rng.uniform(*LOW_RESOLUTION))))
        image = cv2.resize(
            cv2.resize(image, (small, small), interpolation=cv2.INTER_AREA),
            (size, size),
            interpolation=cv2.INTER_LINEAR,
        )
    mean = image.mean()
    image = ((image - mean) * rng.uniform(*CONTRAST_RANGE) + mean) * rng.uniform(*BRIGHTNESS_FACTOR)
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return np.clip(image, 0, 255).astype(np.uint8).reshape(size, size, 1)


# ------------------------------------------------- the harder evaluation's queries

HARD_QUERIES = ("darker", "rotated", "smaller")  # the 0.7x darker, 6-degree rotated, 1/3-size copies


def hard_query(face, kind):
    """A copy of a face crop as a user's altered photo would give it: 0.7x darker,
    rotated 6 degrees, or from a photo at 1/3 size (the crop cut from 1/3 of the pixels)."""
    import cv2

    size = face.shape[0]
    image = face.reshape(size, size).astype(np.float32)
    if kind == "darker":
        image = image * 0.7
    elif kind == "rotated":
        image = cv2.warpAffine(
            image, cv2.getRotationMatrix2D((size / 2, size / 2), 6, 1.0), (size, size), borderMode=cv2.BORDER_REFLECT
        )
    elif kind == "smaller":
        small = max(4, round(size / 3))
        image = cv2.resize(
            cv2.resize(image, (small, small), interpolation=cv2.INTER_AREA),
            (size, size),
            interpolation=cv2.INTER_LINEAR,
        )
    else:
        raise ValueError(f"unknown query kind {kind!r}: one of {HARD_QUERIES}")
    return np.clip(np.round(image), 0, 255).astype(np.uint8).reshape(size, size, 1)
