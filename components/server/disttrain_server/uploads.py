"""Uploaded images are checked before any decoder sees them: format by magic bytes, size by header.

Only PNG and JPEG reach OpenCV (its other decoders, GIF, BMP, TIFF, WebP, OpenEXR, JPEG 2000,
PNM ..., are attack surface the demo does not need): anything else is a 415 naming the
allowed formats. The width and height are read from the file's own header (PNG's IHDR,
JPEG's SOF segment) by the few lines below, not by a decoder, and summed over all images
of one request against --max-request-pixels (413), so one request cannot make the worker
decode more than that however many images it packs.

A PixelBudget belongs to one request (created in the view, never shared between threads).
"""

import struct

from disttrain_server.errors import ApiError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SIGNATURE = b"\xff\xd8\xff"
ALLOWED = "PNG or JPEG"
# Recognised only to name them in the refusal.
OTHER_FORMATS = {
    b"GIF87a": "GIF",
    b"GIF89a": "GIF",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
    b"RIFF": "RIFF/WebP",
    b"\x00\x00\x00\x0cjP": "JPEG 2000",
    b"%PDF": "PDF",
    b"<svg": "SVG",
    b"<?xml": "XML/SVG",
}
# JPEG start-of-frame markers carry the size: C0-CF except C4 (DHT), C8 (reserved), CC (DAC).
SOF_MARKERS = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM, RST0-7.
STANDALONE_MARKERS = {0x01, *range(0xD0, 0xD8)}


def image_format(data, where=""):
    """'PNG' or 'JPEG' from the first bytes; 415 otherwise (`where`: a message prefix)."""
    if data.startswith(PNG_SIGNATURE):
        return "PNG"
    if data.startswith(JPEG_SIGNATURE):
        return "JPEG"
    other = next((name for magic, name in OTHER_FORMATS.items() if data.startswith(magic)), None)
    got = f"a {other} file" if other else "not a PNG or JPEG file (by its first bytes)"
    raise ApiError(415, f"{where}only {ALLOWED} images are accepted; got {got}")


def image_size(data, kind, where=""):
    """(width, height) from the header; 422 if the header is missing or broken."""
    size = _png_size(data) if kind == "PNG" else _jpeg_size(data)
    if size is None or 0 in size:
        raise ApiError(422, f"{where}not a decodable image (a {kind} file without a valid header)")
    return size


def _png_size(data):
    # Signature (8), then the first chunk must be IHDR: length (4), type (4), width (4), height (4).
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def _jpeg_size(data):
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in STANDALONE_MARKERS:
            at += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header before them
            return None
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in SOF_MARKERS:
            if at + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        if length < 2:
            return None
        at += 2 + length
    return None


class PixelBudget:
    """The pixels one request may still have decoded (--max-request-pixels)."""

    def __init__(self, limit):
        self.limit = limit
        self.used = 0

    def admit(self, data, where=""):
        """Check one encoded image before it is decoded: its format (415), its header (422), the budget (413)."""
        if not data:
            raise ApiError(422, f"{where}the image is empty")
        kind = image_format(data, where)
        width, height = image_size(data, kind, where)
        self.used += width * height
        if self.used > self.limit:
            raise ApiError(
                413,
                f"{where}images of this request add up to {self.used:,} pixels (this one {width}x{height}), "
                f"more than the {self.limit:,} pixel budget per request (--max-request-pixels)",
            )
