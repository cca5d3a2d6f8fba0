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


# ------------------------------------------------------- distractor photos (issue 14)
# One real face and a textured region that the face cascade alone can take for a face
# (a patterned shirt, a striped wall): the detector must box the face, not the texture.

TEXTURES = ("stripes", "fine-stripes", "plaid", "checker", "blobs", "gravel")


def texture(kind, height, width):
    """A grayscale uint8 texture: high-frequency patterns like shirts, walls and posters."""
    yy, xx = np.mgrid[:height, :width].astype(np.float32)
    if kind == "stripes":
        pattern = 127 + 127 * np.sin(xx / 3 + yy / 7)
    elif kind == "fine-stripes":
        pattern = 127 + 127 * np.sin(xx / 2 + yy / 50)
    elif kind == "plaid":
        pattern = 30 + 64 * (np.sin(xx / 5) > 0) + 64 * (np.sin(yy / 5) > 0) + 64 * ((xx // 24 + yy // 24) % 2)
    elif kind == "checker":
        pattern = 255 * ((yy // 8 + xx // 8) % 2)
    elif kind == "blobs":
        from skimage.data import binary_blobs

        side = max(height, width)
        pattern = 255 * binary_blobs(length=side, blob_size_fraction=0.04, rng=1)[:height, :width]
    elif kind == "gravel":
        from skimage.data import gravel

        pattern = cv2.resize(gravel(), (width, height))
    else:
        raise ValueError(f"unknown texture {kind!r}")
    return np.clip(pattern, 0, 255).astype(np.uint8)


def _bgr(gray):
    return cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR) if gray.ndim == 2 else gray


def beside(photo, kind, left=False):
    """The photo with a texture panel of its own size on its right (or left)."""
    photo = _bgr(photo)
    panel = _bgr(texture(kind, *photo.shape[:2]))
    return np.ascontiguousarray(np.concatenate([panel, photo] if left else [photo, panel], axis=1))


def patterned_shirt(photo, kind, below=0.55):
    """The photo with everything under `below` of its height (the clothes) replaced by a texture."""
    photo = _bgr(photo).copy()
    top = int(photo.shape[0] * below)
    photo[top:] = _bgr(texture(kind, photo.shape[0] - top, photo.shape[1]))
    return photo


def portrait(face_photo, kind, scale=3):
    """A phone-sized portrait of a sample person: the photo enlarged `scale` times, standing
    above a patterned shirt that fills the lower part, next to a textured wall."""
    big = cv2.resize(face_photo, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    body = texture(kind, big.shape[0] // 2, big.shape[1])
    return beside(np.concatenate([big, body]), "gravel" if kind != "gravel" else "plaid")


def distractor_photos():
    """[(name, BGR photo, the real face's box)]: the astronaut and sample people with textures.
    The real face's box is where the face is in the photo without the texture (moved with it)."""
    from disttrain_contract.faces import find_face

    photos = []
    ast = astronaut()
    face = find_face(ast).box
    width = ast.shape[1]
    # (a sample of the combinations: each 512 x 1024 photo costs 0.1-0.5 s of detection, and make test is full)
    for kind in ("stripes", "fine-stripes", "blobs"):
        photos.append((f"astronaut|{kind}", beside(ast, kind), face))
    for kind in ("blobs", "plaid"):
        photos.append((f"{kind}|astronaut", beside(ast, kind, left=True), (face[0] + width, *face[1:])))
    for kind in ("stripes", "plaid", "checker"):
        photos.append((f"astronaut in a {kind} suit", patterned_shirt(ast, kind), face))
    small = cv2.resize(ast, None, fx=0.6, fy=0.6, interpolation=cv2.INTER_AREA)
    photos.append(("small astronaut|stripes", beside(small, "stripes"), find_face(small).box))
    for i, kind in zip((0, 3, 7, 12, 21, 50), TEXTURES):
        photo = portrait(lfw_photos()[i], kind)
        photos.append(
            (
                f"lfw-{i:03d} portrait, {kind} shirt",
                photo,
                find_face(cv2.resize(lfw_photos()[i], None, fx=3, fy=3, interpolation=cv2.INTER_CUBIC)).box,
            )
        )
    return photos


def same_face(box, truth, tolerance=0.25):
    """The chosen box is the real face: centres within `tolerance` of its size, sizes within 1.5x."""
    (x, y, w, h), (tx, ty, tw, th) = box, truth
    return (
        abs(x + w / 2 - tx - tw / 2) <= tolerance * tw
        and abs(y + h / 2 - ty - th / 2) <= tolerance * th
        and 1 / 1.5 <= w / tw <= 1.5
    )


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
