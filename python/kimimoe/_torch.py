"""The torch half: case files from the tensors a serving stack holds, and
candidates from its output. Imported only when called (torch is optional)."""
import torch

from . import _safetensors
from ._activations import KINDS, PARAMS

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
    """FlashInfer's 128x4 swizzled E8M0 scales -> linear [rows, cols].

    Rows are padded to 128 and columns to 4; byte (m, k) sits at
    mTile*(nK*512) + kTile*512 + (m%32)*16 + ((m%128)//32)*4 + k%4, with nK
    the padded columns / 4 (kimimoe's docs/CONTRACT.md "Scale layouts").
    """
    n_k = (cols + 3) // 4
    m = torch.arange(rows).view(-1, 1)
    k = torch.arange(cols).view(1, -1)
    off = (m // 128) * (n_k * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4
    return sw.reshape(-1)[off.reshape(-1)].reshape(rows, cols)


def _to_up_gate(t, layout, n):
    """Rows of an FC1 tensor [E, 2N, ...] in `layout` -> [up; gate]."""
    if layout == "up_gate":
        return t
    if layout == "gate_up":
        return torch.cat([t[:, n:], t[:, :n]], dim=1)
    if layout == "interleaved":
        return torch.cat([t[:, 1::2], t[:, 0::2]], dim=1)
    raise ValueError("fc1_layout must be up_gate, gate_up or interleaved, not %r" % (layout,))


def _u8(name, t):
    if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e8m0fnu", None)):
        t = t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError("%s: expected uint8 codes, got %s" % (name, t.dtype))
    return t.detach().cpu().contiguous()


def _kind(activation):
    """The canonical name, gatedness and parameters of an activation name or alias."""
    a = str(activation).strip().lower()
    for name, (aliases, gated, reads, _) in KINDS.items():
        if a == name or a in aliases:
            return name, gated, reads
    raise ValueError("activation %r is not a kind kimimoe has (known: %s)" % (activation, ", ".join(KINDS)))


def dump_case(path, *, topk_ids, topk_weights, w31, w31_scale, w2, w2_scale, activation,
              x=None, x_q=None, x_scale=None, fc1_layout="up_gate", scale_layout="linear",
              w31_bias=None, w2_bias=None, router_logits=None, correction_bias=None,
              chain="mxfp8", recipe="rceil", ep_size=1, ep_rank=0, **params):
    """Write a kimimoe case file from torch tensors (see the package doc)."""
    kind, gated, reads = _kind(activation)
    for key in params:
        if key not in PARAMS:
            raise TypeError("unknown parameter %r (want one of %s)" % (key, ", ".join(PARAMS)))
        if key not in reads:
            raise TypeError("activation %s has no parameter %r (it reads: %s)" % (kind, key, ", ".join(reads) or "none"))
    w31, w2 = _u8("w31", w31), _u8("w2", w2)
    e, r, k2 = w31.shape
    k, n = 2 * k2, w2.shape[2] * 2
    if r != (2 * n if gated else n):
        raise ValueError("w31 has %d rows for N = %d: activation %s wants %d (%s)" % (
            r, n, kind, 2 * n if gated else n, "[up; gate] FC1" if gated else "one FC1 row per output"))
    w31_scale, w2_scale = _u8("w31_scale", w31_scale), _u8("w2_scale", w2_scale)
    if scale_layout == "swizzled":
        w31_scale = torch.stack([unswizzle_scales(s, r, k // 32) for s in w31_scale.reshape(e, -1)])
        w2_scale = torch.stack([unswizzle_scales(s, k, n // 32) for s in w2_scale.reshape(e, -1)])
    elif scale_layout != "linear":
        raise ValueError("scale_layout must be linear or swizzled, not %r" % (scale_layout,))
    w31_scale = w31_scale.reshape(e, r, k // 32)
    w2_scale = w2_scale.reshape(e, k, n // 32)
    if gated:
        w31 = _to_up_gate(w31, fc1_layout, n)
        w31_scale = _to_up_gate(w31_scale, fc1_layout, n)
    t = {
        "topk_ids": entry(topk_ids.to(torch.int32)),
        "topk_weights": entry(topk_weights.to(torch.float32)),
        "w31": entry(w31), "w31_scale": entry(w31_scale), "w2": entry(w2), "w2_scale": entry(w2_scale),
    }
    if x is not None:
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            x = x.to(torch.float32)
        t["x"] = entry(x)
    else:
        t["x_q"], t["x_scale"] = entry(_u8("x_q", x_q)), entry(_u8("x_scale", x_scale))
    if w31_bias is not None:
        b = w31_bias.detach().cpu().reshape(e, r, 1)
        t["w31_bias"] = entry((_to_up_gate(b, fc1_layout, n) if gated else b).reshape(e, r).to(torch.float32))
    if w2_bias is not None:
        t["w2_bias"] = entry(w2_bias.to(torch.float32))
    if router_logits is not None:
        t["router_logits"] = entry(router_logits.to(torch.float32))
    if correction_bias is not None:
        t["correction_bias"] = entry(correction_bias.to(torch.float32))
    md = {"activation": kind, "chain": chain, "recipe": recipe, "ep_size": str(ep_size), "ep_rank": str(ep_rank)}
    for key, v in params.items():
        md[key] = ",".join(repr(float(u)) for u in (v if isinstance(v, (list, tuple)) else [v]))
    _safetensors.write(path, t, md)


def write_candidate(path, out, tensor="out"):
    """Save a kernel's output [M, K] (float32, bfloat16 or float16) as the
    candidate tensor of a safetensors file."""
    if out.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError("the output has dtype %s; kimimoe check reads float32, bfloat16 or float16" % out.dtype)
    _safetensors.write(path, {tensor: entry(out)})
