"""The torch half: case files from the tensors a serving stack holds, and
candidates from its output. Imported only when called (torch is optional)."""
import torch

from . import _case, _safetensors

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}


def entry(t):
    """A safetensors entry (dtype, shape, bytes) of a CPU copy of t."""
    t = t.detach().cpu().contiguous()
    if t.dtype not in _DTYPES:
        raise TypeError("cannot store dtype %s" % t.dtype)
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    try:
        b = raw.numpy().tobytes()
    except RuntimeError:  # torch built without numpy
        b = bytes(raw.tolist())
    return (_DTYPES[t.dtype], tuple(t.shape), b)


def unswizzle_scales(sw, rows, cols):
    """FlashInfer's 128x4 swizzled E8M0 scales -> linear [rows, cols]
    (_case.unswizzle_offsets gives the layout)."""
    return sw.reshape(-1)[_case.unswizzle_offsets(_Ops, rows, cols)].reshape(rows, cols)


class _Ops:
    """torch's part of _case.dump_case: everything is copied to the CPU."""
    arange = staticmethod(torch.arange)
    stack = staticmethod(torch.stack)

    @staticmethod
    def cat(ts, dim):
        return torch.cat(ts, dim=dim)

    @staticmethod
    def u8(name, t):
        if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e8m0fnu", None)):
            t = t.view(torch.uint8)
        if t.dtype != torch.uint8:
            raise TypeError("%s: expected uint8 codes, got %s" % (name, t.dtype))
        return t.detach().cpu().contiguous()

    @staticmethod
    def host(t):
        return t.detach().cpu()

    @staticmethod
    def cast(t, dtype):
        return t.to({"int32": torch.int32, "float32": torch.float32}[dtype])

    @staticmethod
    def is_float(t):
        return t.dtype in (torch.float32, torch.bfloat16, torch.float16)

    entry = staticmethod(entry)


def dump_case(path, **kw):
    """Write a kimimoe case file from torch tensors (see the package doc)."""
    _case.dump_case(_Ops, path, **kw)


def write_candidate(path, out, tensor="out"):
    """Save a kernel's output [M, K] (float32, bfloat16 or float16) as the
    candidate tensor of a safetensors file."""
    if out.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError("the output has dtype %s; kimimoe check reads float32, bfloat16 or float16" % out.dtype)
    _safetensors.write(path, {tensor: entry(out)})
