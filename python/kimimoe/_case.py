"""dump_case's work, written once for any array library: the checks, the
layout conversions and the metadata. _torch and _numpy give it their ops."""
from . import _safetensors
from ._activations import KINDS, PARAMS


def kind(activation):
    """The canonical name, gatedness and parameters of an activation name or alias."""
    a = str(activation).strip().lower()
    for name, (aliases, gated, reads, _) in KINDS.items():
        if a == name or a in aliases:
            return name, gated, reads
    raise ValueError("activation %r is not a kind kimimoe has (known: %s)" % (activation, ", ".join(KINDS)))


def unswizzle_offsets(ops, rows, cols):
    """FlashInfer's 128x4 swizzled E8M0 scales: the linear [rows, cols]
    byte (m, k) sits at mTile*(nK*512) + kTile*512 + (m%32)*16 +
    ((m%128)//32)*4 + k%4, with nK the padded columns / 4 (kimimoe's
    docs/CONTRACT.md "Scale layouts")."""
    n_k = (cols + 3) // 4
    m = ops.arange(rows).reshape(-1, 1)
    k = ops.arange(cols).reshape(1, -1)
    return ((m // 128) * (n_k * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4).reshape(-1)


def to_up_gate(ops, t, layout, n):
    """Rows of an FC1 tensor [E, 2N, ...] in `layout` -> [up; gate]."""
    if layout == "up_gate":
        return t
    if layout == "gate_up":
        return ops.cat([t[:, n:], t[:, :n]], 1)
    if layout == "interleaved":
        return ops.cat([t[:, 1::2], t[:, 0::2]], 1)
    raise ValueError("fc1_layout must be up_gate, gate_up or interleaved, not %r" % (layout,))


def dump_case(ops, path, *, topk_ids, topk_weights, w31, w31_scale, w2, w2_scale, activation,
              x=None, x_q=None, x_scale=None, fc1_layout="up_gate", scale_layout="linear",
              w31_bias=None, w2_bias=None, router_logits=None, correction_bias=None,
              chain="mxfp8", recipe="rceil", ep_size=1, ep_rank=0, **params):
    """Write a kimimoe case file (see the package doc); ops is the array library's."""
    name, gated, reads = kind(activation)
    for key in params:
        if key not in PARAMS:
            raise TypeError("unknown parameter %r (want one of %s)" % (key, ", ".join(PARAMS)))
        if key not in reads:
            raise TypeError("activation %s has no parameter %r (it reads: %s)" % (name, key, ", ".join(reads) or "none"))
    w31, w2 = ops.u8("w31", w31), ops.u8("w2", w2)
    e, r, k2 = w31.shape
    k, n = 2 * k2, w2.shape[2] * 2
    if r != (2 * n if gated else n):
        raise ValueError("w31 has %d rows for N = %d: activation %s wants %d (%s)" % (
            r, n, name, 2 * n if gated else n, "[up; gate] FC1" if gated else "one FC1 row per output"))
    w31_scale, w2_scale = ops.u8("w31_scale", w31_scale), ops.u8("w2_scale", w2_scale)
    if scale_layout == "swizzled":
        o31, o2 = unswizzle_offsets(ops, r, k // 32), unswizzle_offsets(ops, k, n // 32)
        w31_scale = ops.stack([s.reshape(-1)[o31].reshape(r, k // 32) for s in w31_scale.reshape(e, -1)])
        w2_scale = ops.stack([s.reshape(-1)[o2].reshape(k, n // 32) for s in w2_scale.reshape(e, -1)])
    elif scale_layout != "linear":
        raise ValueError("scale_layout must be linear or swizzled, not %r" % (scale_layout,))
    w31_scale = w31_scale.reshape(e, r, k // 32)
    w2_scale = w2_scale.reshape(e, k, n // 32)
    if gated:
        w31 = to_up_gate(ops, w31, fc1_layout, n)
        w31_scale = to_up_gate(ops, w31_scale, fc1_layout, n)
    t = {
        "topk_ids": ops.entry(ops.cast(topk_ids, "int32")),
        "topk_weights": ops.entry(ops.cast(topk_weights, "float32")),
        "w31": ops.entry(w31), "w31_scale": ops.entry(w31_scale), "w2": ops.entry(w2), "w2_scale": ops.entry(w2_scale),
    }
    if x is not None:
        t["x"] = ops.entry(x if ops.is_float(x) else ops.cast(x, "float32"))
    else:
        t["x_q"], t["x_scale"] = ops.entry(ops.u8("x_q", x_q)), ops.entry(ops.u8("x_scale", x_scale))
    if w31_bias is not None:
        b = ops.host(w31_bias).reshape(e, r, 1)
        t["w31_bias"] = ops.entry(ops.cast((to_up_gate(ops, b, fc1_layout, n) if gated else b).reshape(e, r), "float32"))
    for key, v in (("w2_bias", w2_bias), ("router_logits", router_logits), ("correction_bias", correction_bias)):
        if v is not None:
            t[key] = ops.entry(ops.cast(v, "float32"))
    md = {"activation": name, "chain": chain, "recipe": recipe, "ep_size": str(ep_size), "ep_rank": str(ep_rank)}
    for key, v in params.items():
        md[key] = ",".join(repr(float(u)) for u in (v if isinstance(v, (list, tuple)) else [v]))
    _safetensors.write(path, t, md)
