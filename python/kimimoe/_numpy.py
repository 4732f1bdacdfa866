"""numpy arrays as candidates and the oracle's output as an array, with no
torch: what a CI image holding numpy alone needs."""
from . import _safetensors

# numpy dtype names kimimoe check reads, and their safetensors names
# (bfloat16 is ml_dtypes' numpy dtype).
_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def is_array(x):
    """Whether x is a numpy array (not a torch tensor, which also has __array__)."""
    return type(x).__module__ == "numpy" and hasattr(x, "dtype") and hasattr(x, "tobytes")


def write_candidate(path, out, tensor="out"):
    """Save a numpy array [M, K] (float32, float16 or ml_dtypes' bfloat16)
    as the candidate tensor of a safetensors file."""
    if out.dtype.name not in _DTYPES:
        raise TypeError("the output has dtype %s; kimimoe check reads float32, bfloat16 or float16" % out.dtype)
    if out.ndim != 2:
        raise ValueError("the output has shape %s; want [M, K]" % (out.shape,))
    _safetensors.write(path, {tensor: _entry(out)})


# safetensors names of the numpy dtypes a case holds.
_CASE_DTYPES = dict(_DTYPES, float64="F64", int64="I64", int32="I32", uint8="U8")


def _entry(t):
    """A safetensors entry (dtype, shape, little-endian C-order bytes) of t."""
    name = _CASE_DTYPES.get(t.dtype.name)
    if name is None:
        raise TypeError("cannot store dtype %s" % t.dtype)
    return (name, tuple(t.shape), t.astype(t.dtype.newbyteorder("<"), copy=False).tobytes(order="C"))


class _Ops:
    """numpy's part of _case.dump_case (bfloat16 and the float8 codes as
    ml_dtypes' numpy dtypes)."""

    def __init__(self, np):
        self.np = np

    def arange(self, n):
        return self.np.arange(n)

    def cat(self, ts, dim):
        return self.np.concatenate(ts, axis=dim)

    def stack(self, ts):
        return self.np.stack(ts)

    def u8(self, name, t):
        if t.dtype.name in ("float8_e4m3fn", "float8_e8m0fnu"):
            t = t.view(self.np.uint8)
        if t.dtype != self.np.uint8:
            raise TypeError("%s: expected uint8 codes, got %s" % (name, t.dtype))
        return self.np.ascontiguousarray(t)

    def host(self, t):
        return t

    def cast(self, t, dtype):
        return t.astype(dtype)

    def is_float(self, t):
        return t.dtype.name in _DTYPES

    entry = staticmethod(_entry)


def dump_case(path, **kw):
    """Write a kimimoe case file from numpy arrays (see the package doc),
    with no torch."""
    import numpy as np
    from . import _case
    _case.dump_case(_Ops(np), path, **{k: np.asarray(v) if k in _ARRAY_ARGS and v is not None else v for k, v in kw.items()})


# dump_case's array arguments (lists are taken as arrays too).
_ARRAY_ARGS = ("topk_ids", "topk_weights", "w31", "w31_scale", "w2", "w2_scale", "x", "x_q", "x_scale",
               "w31_bias", "w2_bias", "router_logits", "correction_bias")
