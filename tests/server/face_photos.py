"""Photos for the face tests (imported as `server.face_photos`): the faces sample's own
photos (scikit-image's lfw_subset, one person each, enlarged by the copier into
photos) and scikit-image's astronaut, encoded as files the way a client sends them.

Variants are made on the whole photo, so a query still goes through detection
and cropping, like a new photo of the same person would."""

import base64
import functools
import os

import cv2
import numpy as np


@functools.lru_cache(maxsize=1)
def lfw_photos():
    """The 100 sample photos (grayscale uint8 150x150), in the copier's order: person i is lfw-{i:03d}."""
    from disttrain_copier.sources import _lfw_subset_photos

    return tuple(_lfw_subset_photos())


def astronaut():
    """A real colour photo with one face (Eileen Collins), BGR as OpenCV reads files."""
    from skimage.data import astronaut as rgb

    return np.ascontiguousarray(rgb()[..., ::-1])


def png(image):
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def b64(image):
    return {"b64": base64.b64encode(png(image)).decode()}


def other_view(photo, shift=(6, -5), scale=1.1, angle=4, brightness=15, contrast=1.1, zoom=1.3):
    """Another photo of the same face: rotated, scaled and shifted in the frame, brighter, at another resolution."""
    h, w = photo.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    matrix[:, 2] += shift
    moved = cv2.warpAffine(photo, matrix, (w, h), borderMode=cv2.BORDER_REPLICATE)
    return cv2.resize(cv2.convertScaleAbs(moved, alpha=contrast, beta=brightness), None, fx=zoom, fy=zoom)


def side_by_side(big, small, factor=1.5):
    """One photo with two people: `big` enlarged by `factor` on the left, `small` on the right, on grey."""
    big = cv2.resize(big, None, fx=factor, fy=factor, interpolation=cv2.INTER_CUBIC)
    canvas = np.full((big.shape[0], big.shape[1] + small.shape[1] + 40), 128, np.uint8)
    canvas[:, : big.shape[1]] = big
    top = (big.shape[0] - small.shape[0]) // 2
    canvas[top : top + small.shape[0], big.shape[1] + 40 :] = small
    return canvas


def blank(height=300, width=300):
    return np.full((height, width, 3), 200, np.uint8)


def write_seed(folder, people):
    """A --gallery-seed folder: {person: [photos]} as <folder>/<person>/<i>.png (or <person>.png for one photo)."""
    os.makedirs(folder, exist_ok=True)
    for person, photos in people.items():
        if len(photos) == 1:
            cv2.imwrite(os.path.join(folder, f"{person}.png"), photos[0])
            continue
        os.makedirs(os.path.join(folder, person), exist_ok=True)
        for i, photo in enumerate(photos):
            cv2.imwrite(os.path.join(folder, person, f"{i}.png"), photo)
    return folder


if __name__ == "__main__":
    # A demo --gallery-seed folder: python tests/server/face_photos.py DIR [N]
    import sys

    target, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    people = {f"lfw-{i:03d}": [photo] for i, photo in enumerate(lfw_photos()[:count])}
    write_seed(target, {**people, "Eileen_Collins": [astronaut()]})
    print(f"{target}: {len(people) + 1} people")
