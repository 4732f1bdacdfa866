"""A small safetensors reader and writer on the standard library alone.

The container: an 8-byte little-endian header length, a JSON header (each
tensor's dtype, shape and byte offsets, and an optional "__metadata__" of
strings), then the tensors' bytes. kimimoe's Go reader is strict (offsets
contiguous and in order, no overlap, no trailing bytes), and this writer
produces exactly that.
"""
import json
import os
import struct
import tempfile

DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U16": 2, "U8": 1}


def write(path, tensors, metadata=None):
    """Write tensors {name: (dtype, shape, raw little-endian bytes)} and
    metadata {str: str} to path, atomically (a temporary file, then a
    rename), in name order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, off = [], 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        n = 1
        for d in shape:
            n *= d
        if dtype not in DTYPE_SIZE or len(raw) != n * DTYPE_SIZE[dtype]:
            raise ValueError("tensor %r: %d bytes for %s %s" % (name, len(raw), dtype, list(shape)))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".kimimoe-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read(path):
    """Read a safetensors file: ({name: (dtype, shape, raw bytes)}, metadata).

    The file is checked as strictly as kimimoe's Go reader checks it: a
    header inside the file, known dtypes, non-negative shapes, offsets in
    order with no gap or overlap, each tensor's bytes its shape's size, and
    no trailing bytes. A bad file raises ValueError naming what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: %d bytes, shorter than the 8-byte header length" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n < 2 or 8 + n > len(data):
        raise ValueError("%s: header length %d does not fit the file's %d bytes" % (path, n, len(data)))
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ValueError("%s: the header is not JSON: %s" % (path, e)) from e
    if not isinstance(header, dict):
        raise ValueError("%s: the header is not a JSON object" % path)
    md = header.pop("__metadata__", {})
    if not isinstance(md, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in md.items()):
        raise ValueError("%s: __metadata__ is not a map of strings" % path)
    body = len(data) - 8 - n
    spans, out = [], {}
    for name, e in header.items():
        try:
            dtype, shape, (a, b) = e["dtype"], e["shape"], e["data_offsets"]
        except (TypeError, KeyError, ValueError) as ex:
            raise ValueError("%s: tensor %r: entry %r lacks dtype, shape or two data_offsets" % (path, name, e)) from ex
        if dtype not in DTYPE_SIZE:
            raise ValueError("%s: tensor %r: unknown dtype %r" % (path, name, dtype))
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError("%s: tensor %r: shape %r is not a list of non-negative integers" % (path, name, shape))
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b)) or not 0 <= a <= b <= body:
            raise ValueError("%s: tensor %r: data_offsets [%r, %r] outside the %d data bytes" % (path, name, a, b, body))
        size = DTYPE_SIZE[dtype]
        for d in shape:
            size *= d
        if b - a != size:
            raise ValueError("%s: tensor %r: %d bytes for %s %s (want %d)" % (path, name, b - a, dtype, shape, size))
        spans.append((a, b, name))
        out[name] = (dtype, tuple(shape), data[8 + n + a:8 + n + b])
    end = 0
    for a, b, name in sorted(spans):
        if a != end:
            raise ValueError("%s: tensor %r starts at %d, not at %d (a gap or an overlap)" % (path, name, a, end))
        end = b
    if end != body:
        raise ValueError("%s: %d bytes after the last tensor" % (path, body - end))
    return out, md


def f32(shape, values):
    """An F32 tensor entry from Python floats."""
    return ("F32", tuple(shape), struct.pack("<%df" % len(values), *values))
