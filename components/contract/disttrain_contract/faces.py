"""Faces: detection, cropping and augmentation, shared by the copier, the
trainer, the aggregator and the server so that training and serving see faces
cut out the same way.

Detection uses OpenCV's Haar cascade (`haarcascade_frontalface_default.xml`,
shipped by opencv-python-headless 4.x under cv2.data.haarcascades; OpenCV 5
wheels have neither the cascades nor CascadeClassifier).
"""

import threading

import numpy as np

from disttrain_contract.errors import ContractError

FACE_SIZE = 32  # face crops are FACE_SIZE x FACE_SIZE grayscale
FACE_MARGIN = 0.1  # extra border around the detector's box, as a fraction of its size


class NoFaceFound(ContractError):
    """The image holds no face the detector can find."""


# One cascade per thread, never shared: CascadeClassifier.detectMultiScale keeps
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


def _load_cascade():
    import cv2

    if not hasattr(cv2, "CascadeClassifier") or not hasattr(cv2, "data"):
        raise ContractError("this OpenCV build has no Haar cascades (OpenCV 5?); install opencv-python-headless 4.x")
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    if cascade.empty():
        raise ContractError("could not load OpenCV's haarcascade_frontalface_default.xml")
    return cascade


def to_gray(image):
    import cv2

    if image.ndim == 3 and image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    if image.ndim == 3:
        return image[..., 0]
    return image


def detect_faces(image):
    """Face boxes (x, y, w, h) in a BGR or grayscale uint8 image, largest first."""
    import cv2

    gray = cv2.equalizeHist(to_gray(image))
    smallest = max(24, min(gray.shape[:2]) // 10)
    boxes = _cascade().detectMultiScale(gray, scaleFactor=1.1, minNeighbors=4, minSize=(smallest, smallest))
    boxes = [tuple(int(v) for v in box) for box in (boxes if len(boxes) else [])]
    return sorted(boxes, key=lambda b: b[2] * b[3], reverse=True)


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
    """(crop, box, number of faces found) for the largest face; NoFaceFound if none."""
    boxes = detect_faces(image)
    if not boxes:
        raise NoFaceFound("no face found in the image")
    return crop_face(image, boxes[0], size), boxes[0], len(boxes)


def decode_photo(data):
    """Encoded image bytes -> BGR uint8 array (ContractError if it is not an image)."""
    import cv2

    from disttrain_contract.artifact import imdecode

    return imdecode(data, cv2.IMREAD_COLOR)


def augment(face, rng):
    """A random view of a face crop: shift/zoom crop, small rotation, brightness
    and contrast, horizontal flip. The positives of self-supervised triplets, and
    the held-out queries of the retrieval evaluation (with a seeded rng)."""
    import cv2

    size = face.shape[0]
    image = face.reshape(size, size).astype(np.float32)
    angle = rng.uniform(-12, 12)
    scale = rng.uniform(0.9, 1.12)
    shift = rng.uniform(-0.08, 0.08, size=2) * size
    matrix = cv2.getRotationMatrix2D((size / 2, size / 2), angle, scale)
    matrix[:, 2] += shift
    image = cv2.warpAffine(image, matrix, (size, size), borderMode=cv2.BORDER_REFLECT)
    image = (image - 128.0) * rng.uniform(0.8, 1.2) + 128.0 + rng.uniform(-25, 25)
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return np.clip(image, 0, 255).astype(np.uint8).reshape(size, size, 1)
