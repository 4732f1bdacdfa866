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
    """Read a safetensors file: ({name: (dtype, shape, raw bytes)}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    md = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[8 + n + a:8 + n + b])
    return out, md


def f32(shape, values):
    """An F32 tensor entry from Python floats."""
    return ("F32", tuple(shape), struct.pack("<%df" % len(values), *values))
