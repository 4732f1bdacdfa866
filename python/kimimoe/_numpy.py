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
    name = _DTYPES.get(out.dtype.name)
    if name is None:
        raise TypeError("the output has dtype %s; kimimoe check reads float32, bfloat16 or float16" % out.dtype)
    if out.ndim != 2:
        raise ValueError("the output has shape %s; want [M, K]" % (out.shape,))
    raw = out.astype(out.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
    _safetensors.write(path, {tensor: (name, tuple(out.shape), raw)})
