"""The face gallery: enrolled people on the shared volume, searched by embedding distance.

    GALLERY/                     (default WORKDIR/gallery, --gallery)
      index.json                 {"entries": [{"id", "name", "box", "confidence", "eyes", "faces_found", "created", "photo_sha256", "source"}]}
      faces/<id>.png             the 32x32 grayscale crop as cut out (disttrain_contract.faces.find_face's); each
                                 model preprocesses it its own way when it embeds it (LoadedModel.predict)
      thumbs/<id>.png            a small colour thumbnail of the face, for the web page
      embeddings/<model>.npz     ids and embeddings of the entries under one model (LoadedModel.cache_key)
      .lock                      flock'ed by every writer

Embeddings are computed once per face and model: at enrolment, or, for a newly
published model, by the first search that needs them (then written to the
model's .npz for every other process). A search only embeds its own photo.
The crop is kept because a new model needs the same pixels the old one saw.

Every process (gunicorn worker) has its own Gallery over the same folder.
Writers take an exclusive flock on .lock and replace files atomically
(temporary name + rename), so a reader needs no lock: it sees the old or the
new index.json, never half of one, and re-reads it only when its (inode,
mtime, size) changed. Order of writes on enrolment: crop, thumbnail,
embeddings, then index.json, so an entry a reader can see has all its files.

Caps (--gallery-max-entries, --gallery-max-mb): checked under the same flock as
the write they guard, so two enrolments in different threads or processes
cannot both take the last place. The bytes counted are the files in the gallery
folder (crops, thumbnails, index, embedding caches) plus the new entry's.
"""

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import threading
from datetime import datetime, timezone

import numpy as np

from disttrain_contract import ContractError, atomic_path, atomic_write_bytes, atomic_write_json
from disttrain_contract.evaluation import pairwise_distances
from disttrain_contract.faces import decode_photo, find_face

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 100
THUMBNAIL_SIZE = 96  # pixels, square; the page shows it at 64 CSS px (sharp on high-DPI screens)
THUMBNAIL_MARGIN = 0.3  # more context around the face than the model's crop: it is for people to look at
KEEP_CACHES = 3  # embeddings of the last few models: workers pick up a new model a few seconds apart
SEED_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
MB = 1024 * 1024  # as --max-upload-mb counts them
ENTRY_INDEX_BYTES = (
    512  # an entry's line in index.json, at most (a 100-character name, its id, box, time, hash, source)
)
_ID = re.compile(r"^[0-9a-f]{16}$")


class GalleryFull(ContractError):
    """An enrolment past --gallery-max-entries or --gallery-max-mb."""


class InvalidName(ContractError):
    """A person's name the gallery does not take (empty, too long, control characters)."""


def check_name(value):
    """The name to store (surrounding whitespace removed), or InvalidName saying why not."""
    name = value.strip()
    if not name:
        raise InvalidName("name is empty")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidName(f"name is {len(name)} characters long, the limit is {MAX_NAME_CHARS}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidName("name contains control characters")
    return name


def read_face(data):
    """(BGR image, FoundFace) for an uploaded photo; ContractError or NoFaceFound if unusable.

    The same decode and detector as the copier used for training, so a face is
    cut out of an upload exactly as out of a training photo."""
    image = decode_photo(data)
    return image, find_face(image)


def thumbnail(image, box, size=THUMBNAIL_SIZE, margin=THUMBNAIL_MARGIN):
    """PNG bytes of a square colour thumbnail around the face box."""
    import cv2

    x, y, w, h = box
    side = int(max(w, h) * (1 + 2 * margin))
    cx, cy = x + w // 2, y + h // 2
    top, left = max(0, cy - side // 2), max(0, cx - side // 2)
    patch = image[top : top + side, left : left + side]
    patch = cv2.resize(patch, (size, size), interpolation=cv2.INTER_AREA if patch.shape[0] > size else cv2.INTER_LINEAR)
    return _png(patch)


def _png(array):
    import cv2

    ok, encoded = cv2.imencode(".png", array)
    if not ok:
        raise ContractError("could not encode a PNG")
    return encoded.tobytes()


def _folder_bytes(root):
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a temporary file renamed away meanwhile
                total += os.stat(os.path.join(folder, name)).st_size
    return total


def _stat_key(path):
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def public(entry):
    """An index entry as the API shows it (the photo hash is only for idempotent seeding)."""
    shown = {
        key: entry[key]
        for key in ("id", "name", "box", "confidence", "eyes", "faces_found", "created", "source")
        if key in entry
    }  # (entries enrolled before eye-ranked detection have no confidence or eyes)
    shown["thumbnail"] = f"/v1/gallery/{entry['id']}/thumbnail.png"
    return shown


class Gallery:
    """One process's view of the gallery folder; thread-safe (gunicorn --threads).

    Shared by the request threads: the memos (index and embedding matrix) are replaced whole
    under _mutex and never changed in place, so a reader holds a consistent snapshot; files
    change only under the cross-process flock (_locked) by atomic rename; face detection runs
    on each thread's own OpenCV cascade (disttrain_contract.faces); the model is the store's
    LoadedModel (see model_store). Tested: tests/server/test_server_concurrency.py."""

    def __init__(self, root, max_entries=None, max_bytes=None):
        self.root = os.path.abspath(os.fspath(root))
        self.max_entries = max_entries  # None: no cap (enrol answers GalleryFull past a cap)
        self.max_bytes = max_bytes
        self.index_path = os.path.join(self.root, "index.json")
        self._mutex = threading.Lock()  # guards the memos below
        self._index = (None, [])  # (stat key of index.json, entries)
        self._vectors = (None, None, [], None)  # (index key, model cache key, entries, float32 matrix)
        # How many gallery faces this process has run through a model (enrolment and
        # cache fills, never a search's query): the tests' window on "not per request".
        self.embedded = 0

    # -- paths
    def crop_path(self, entry_id):
        return os.path.join(self.root, "faces", f"{entry_id}.png")

    def thumbnail_path(self, entry_id):
        return os.path.join(self.root, "thumbs", f"{entry_id}.png")

    def cache_path(self, model):
        return os.path.join(self.root, "embeddings", f"{model.cache_key}.npz")

    # -- reading
    def entries(self):
        """The enrolled entries, oldest first; index.json is re-read only after a writer replaced it."""
        key = _stat_key(self.index_path)
        with self._mutex:
            if key is not None and key == self._index[0]:
                return self._index[1]
        entries = self._read_index()
        with self._mutex:
            self._index = (key, entries)
        return entries

    def find(self, entry_id):
        if not _ID.match(entry_id):
            return None
        return next((e for e in self.entries() if e["id"] == entry_id), None)

    def _read_index(self):
        try:
            with open(self.index_path, encoding="utf-8") as fh:
                return json.load(fh)["entries"]
        except (FileNotFoundError, NotADirectoryError):
            return []  # nothing enrolled yet; the folder is created by the first write
        except (ValueError, KeyError, TypeError) as err:
            raise ContractError(f"{self.index_path} is not a gallery index: {err}") from None

    # -- writing
    @contextlib.contextmanager
    def _locked(self):
        """Exclusive across processes (and threads: each call opens its own file description)."""
        try:
            os.makedirs(self.root, exist_ok=True)
            fh = open(os.path.join(self.root, ".lock"), "a+")
        except OSError as err:
            raise ContractError(f"cannot write the gallery at {self.root}: {err.strerror}") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def enrol(self, name, data, model=None, source=None, unique=False, face=None):
        """Add a person's photo (encoded bytes): (entry, created).

        `model`: a loaded faces model to embed the face with now; without one the
        first search under a faces model does it. `unique`: if this name already has
        this exact photo, return that entry instead of a copy (idempotent seeding).
        `face`: read_face(data) if the caller has it already.
        Raises InvalidName, NoFaceFound, GalleryFull (a cap) or ContractError (not an image, or a failed write)."""
        name = check_name(name)
        digest = hashlib.sha256(data).hexdigest()
        if unique and (existing := self._same_photo(self.entries(), name, digest)):
            return existing, False  # the common re-seed case: no decoding, no lock
        image, face = face or read_face(data)
        crop, box, found = face.crop, face.box, face.found
        # The slow parts (detection above, the model) run before the lock: writers only wait for file writes.
        vector = self._embed(model, [crop])[0] if model is not None else None
        crop_png, thumbnail_png = _png(crop), thumbnail(image, box)
        with self._locked():
            entries = self._read_index()
            if unique and (existing := self._same_photo(entries, name, digest)):
                return existing, False  # another worker seeded it while we were detecting
            self._check_caps(entries, len(crop_png) + len(thumbnail_png) + (vector.nbytes if vector is not None else 0))
            entry_id = secrets.token_hex(8)
            entry = {
                "id": entry_id,
                "name": name,
                "box": [int(v) for v in box],
                "confidence": face.confidence,
                "eyes": int(face.eyes),
                "faces_found": int(found),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "photo_sha256": digest,
                **({"source": source} if source else {}),
            }
            atomic_write_bytes(self.crop_path(entry_id), crop_png)
            atomic_write_bytes(self.thumbnail_path(entry_id), thumbnail_png)
            if vector is not None:
                cached = self._read_cache(model)
                cached[entry_id] = vector
                self._write_cache(model, cached, {e["id"] for e in entries} | {entry_id})
            atomic_write_json(self.index_path, {"entries": [*entries, entry]})
        log.info("enrolled %r as %s (%d face(s) in the photo)", name, entry_id, found)
        return entry, True

    def check_room(self):
        """GalleryFull if the gallery is at a cap already: the cheap early answer, before a photo is decoded.
        enrol checks again under the lock, which is what makes the caps hold."""
        self._check_caps(self.entries(), 0)

    def _check_caps(self, entries, new_bytes):
        """Call with the lock held: GalleryFull if one more entry of about `new_bytes` passes a cap."""
        if self.max_entries is not None and len(entries) >= self.max_entries:
            raise GalleryFull(
                f"the gallery is full: {len(entries)} entries, the cap is {self.max_entries} (--gallery-max-entries)"
            )
        if self.max_bytes is not None:
            used = _folder_bytes(self.root)
            if used + new_bytes + ENTRY_INDEX_BYTES > self.max_bytes:
                raise GalleryFull(
                    f"the gallery is full: {used / MB:.2f} MB used, this entry needs about {(new_bytes + ENTRY_INDEX_BYTES) / MB:.3f} MB "
                    f"more, the cap is {self.max_bytes / MB:g} MB (--gallery-max-mb)"
                )

    @staticmethod
    def _same_photo(entries, name, digest):
        return next((e for e in entries if e["name"] == name and e.get("photo_sha256") == digest), None)

    def delete(self, entry_id):
        """Remove an entry: its index line first (readers stop seeing it), then its files. None if unknown."""
        if not _ID.match(entry_id):
            return None
        with self._locked():
            entries = self._read_index()
            entry = next((e for e in entries if e["id"] == entry_id), None)
            if entry is None:
                return None
            atomic_write_json(self.index_path, {"entries": [e for e in entries if e["id"] != entry_id]})
            for path in (self.crop_path(entry_id), self.thumbnail_path(entry_id)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        # Its row in the embedding caches is dropped by the next cache write; readers only look up listed ids.
        log.info("deleted %s (%r)", entry_id, entry["name"])
        return entry

    def seed(self, folder, model=None):
        """Enrol every photo in `folder` that is not enrolled yet: (added, skipped [(path, reason)]).

        One sub-folder per person (its name is the person's, '_' read as a space), or
        files named <person>.<ext> directly in `folder`. Running it again adds nothing."""
        added, skipped, photos = 0, [], _seed_photos(folder)
        for path, person in photos:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                _, created = self.enrol(
                    person, data, model, source=f"seed:{os.path.relpath(path, folder)}", unique=True
                )
            except (OSError, ContractError) as err:  # NoFaceFound and InvalidName are ContractErrors
                skipped.append((path, getattr(err, "strerror", None) or str(err)))
                continue
            added += created
        if skipped:
            log.warning(
                "gallery seed %s: skipped %d photo(s): %s",
                folder,
                len(skipped),
                "; ".join(f"{p}: {r}" for p, r in skipped[:5]),
            )
        log.info("gallery seed %s: %d added, %d already enrolled", folder, added, len(photos) - added - len(skipped))
        return added, skipped

    # -- embeddings
    def _embed(self, model, crops):
        with self._mutex:  # += is a read and a write: two request threads could lose one's count
            self.embedded += len(crops)
        return model.predict(np.stack(crops)).astype(np.float32)

    def _read_cache(self, model):
        """{id: embedding} from this model's cache file ({} if there is none yet)."""
        try:
            with np.load(self.cache_path(model), allow_pickle=False) as npz:
                return dict(zip(npz["ids"].tolist(), npz["embeddings"]))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError) as err:
            # Written atomically, so this is damage from outside: recompute rather than fail every search.
            log.warning("ignoring unreadable embedding cache %s: %s", self.cache_path(model), err)
            return {}

    def _write_cache(self, model, cached, keep_ids):
        """Call with the lock held. Only ids still in the gallery are kept."""
        ids = sorted(i for i in cached if i in keep_ids)
        size = model.meta["embedding_size"]
        matrix = np.stack([cached[i] for i in ids]) if ids else np.zeros((0, size), np.float32)
        path = self.cache_path(model)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:  # a file object: np.savez would append .npz to a path
                np.savez(fh, ids=np.array(ids, dtype=str), embeddings=matrix)
        folder = os.path.dirname(path)
        old = sorted((os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".npz")), key=os.path.getmtime)
        for stale in old[:-KEEP_CACHES]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)

    def vectors(self, model):
        """(entries, float32 [n, embedding_size]) under `model`, computing only what no process has yet.

        Cached in memory until index.json or the model changes, so a search costs
        one os.stat here besides embedding its own photo."""
        index_key = _stat_key(self.index_path)
        with self._mutex:
            memo = self._vectors
        if memo[0] == index_key and memo[1] == model.cache_key and index_key is not None:
            return memo[2], memo[3]
        entries = self._read_index()
        cached = self._read_cache(model)
        if any(e["id"] not in cached for e in entries):
            cached = self._fill_cache(model, entries)
        entries = [e for e in entries if e["id"] in cached]  # a crop deleted under us: gone next time anyway
        size = model.meta["embedding_size"]
        matrix = np.stack([cached[e["id"]] for e in entries]) if entries else np.zeros((0, size), np.float32)
        with self._mutex:
            self._vectors = (index_key, model.cache_key, entries, matrix)
        return entries, matrix

    def _fill_cache(self, model, entries):
        """Embed the entries this model's cache lacks (a new model, or faces enrolled without one)."""
        import cv2

        with self._locked():
            cached = self._read_cache(model)  # another process may have done it while we waited
            missing = [e["id"] for e in entries if e["id"] not in cached]
            crops = {i: cv2.imread(self.crop_path(i), cv2.IMREAD_GRAYSCALE) for i in missing}
            crops = {i: c.reshape(*c.shape, 1) for i, c in crops.items() if c is not None}
            if crops:
                log.info("embedding %d gallery face(s) with model %s", len(crops), model.cache_key)
                cached.update(zip(crops, self._embed(model, list(crops.values()))))
                self._write_cache(model, cached, {e["id"] for e in self._read_index()})
        return cached

    def search(self, model, crop, k):
        """The k nearest entries to a face crop: [{"name", "id", "distance"}], nearest first."""
        entries, matrix = self.vectors(model)
        if not entries:
            return []
        query = model.predict(crop[None]).astype(np.float32)
        distances = pairwise_distances(query.astype(np.float64), matrix.astype(np.float64))[0]
        order = np.argsort(distances, kind="stable")[:k]
        return [
            {"name": entries[i]["name"], "id": entries[i]["id"], "distance": round(float(distances[i]), 4)}
            for i in order
        ]


def _seed_photos(folder):
    """[(path, person)] in a seed folder, sorted so that every worker walks it in the same order."""
    photos = []
    for item in sorted(os.listdir(folder)):
        path = os.path.join(folder, item)
        if item.startswith("."):
            continue
        if os.path.isdir(path):
            photos += [
                (os.path.join(path, f), item.replace("_", " "))
                for f in sorted(os.listdir(path))
                if f.lower().endswith(SEED_EXTENSIONS)
            ]
        elif item.lower().endswith(SEED_EXTENSIONS):
            photos.append((path, os.path.splitext(item)[0].replace("_", " ")))
    return photos
