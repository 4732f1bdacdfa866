#!/usr/bin/env python3
"""Write a kimimoe case file from torch tensors as a serving stack holds them.

One line, from a PyTorch MoE call you want checked:

    from kimimoe_case import write_case
    write_case("case.safetensors", x=x, topk_ids=ids, topk_weights=wts,
               w31=w13, w31_scale=w13_scale, w2=w2, w2_scale=w2_scale,
               activation="situ", fc1_layout="gate_up", scale_layout="swizzled")

then `kimimoe check --case case.safetensors --candidate out.safetensors`
(save the stack's output with safetensors.torch.save_file({"out": out}, ...)).

Arguments (torch tensors on any device; copied to the CPU):
  x             [M, K] float32/bfloat16/float16 (or x_q [M, K] uint8 E4M3 codes
                / float8_e4m3fn with x_scale [M, K/32] uint8 E8M0)
  topk_ids      [M, topk] int32/int64 global expert ids (-1 masks a slot)
  topk_weights  [M, topk] float
  w31, w2       packed MXFP4 uint8: w31 [E, 2N, K/2], w2 [E, K, N/2]
                (element 2j in the low nibble)
  w31_scale, w2_scale  uint8 E8M0: [E, 2N, K/32] and [E, K, N/32] linear,
                or FlashInfer's 128x4 swizzled layout (scale_layout="swizzled",
                one swizzled block per expert, flattened)
  fc1_layout    "up_gate" (FlashInfer's w31: rows [up; gate]), "gate_up"
                (a checkpoint's [w1; w3] = [gate; up], SGLang's w13), or
                "interleaved" (GPT-OSS: gate even rows, up odd rows)
  w31_bias [E, 2N], w2_bias [E, K]   optional, rows in fc1_layout's order
  activation, chain ("mxfp8"), recipe ("rceil"), ep_size, ep_rank, and the
  activation parameters (situ_beta, situ_linear_beta, swiglu_alpha,
  swiglu_beta, swiglu_limit), written to the file's metadata.

Needs torch and safetensors only. The rules it converts by are kimimoe's
docs/CONTRACT.md ("Weights and layouts", "Scale layouts", "Case files").
"""
import torch
from safetensors.torch import save_file


def unswizzle_scales(sw, rows, cols):
    """FlashInfer's 128x4 swizzled E8M0 scales -> linear [rows, cols].

    Rows are padded to 128 and columns to 4; byte (m, k) sits at
    mTile*(nK*512) + kTile*512 + (m%32)*16 + ((m%128)//32)*4 + k%4, with nK
    the padded columns / 4.
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


def _u8(t):
    if t.dtype == getattr(torch, "float8_e4m3fn", None) or t.dtype == getattr(torch, "float8_e8m0fnu", None):
        t = t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError("expected uint8 codes, got %s" % t.dtype)
    return t.detach().cpu().contiguous()


def write_case(path, *, topk_ids, topk_weights, w31, w31_scale, w2, w2_scale, activation,
               x=None, x_q=None, x_scale=None, fc1_layout="up_gate", scale_layout="linear",
               w31_bias=None, w2_bias=None, chain="mxfp8", recipe="rceil", ep_size=1, ep_rank=0,
               **params):
    """Write the case file at path (see the module doc)."""
    w31, w2 = _u8(w31), _u8(w2)
    e, r, k2 = w31.shape
    k, n = 2 * k2, w2.shape[2] * 2
    gated = r == 2 * n
    w31_scale, w2_scale = _u8(w31_scale), _u8(w2_scale)
    if scale_layout == "swizzled":
        w31_scale = torch.stack([unswizzle_scales(s, r, k // 32) for s in w31_scale.reshape(e, -1)])
        w2_scale = torch.stack([unswizzle_scales(s, k, n // 32) for s in w2_scale.reshape(e, -1)])
    elif scale_layout != "linear":
        raise ValueError("scale_layout must be linear or swizzled")
    w31_scale = w31_scale.reshape(e, r, k // 32)
    w2_scale = w2_scale.reshape(e, k, n // 32)
    if gated:
        w31 = _to_up_gate(w31, fc1_layout, n)
        w31_scale = _to_up_gate(w31_scale, fc1_layout, n)
    t = {
        "topk_ids": topk_ids.detach().cpu().to(torch.int32).contiguous(),
        "topk_weights": topk_weights.detach().cpu().to(torch.float32).contiguous(),
        "w31": w31.contiguous(), "w31_scale": w31_scale.contiguous(),
        "w2": w2.contiguous(), "w2_scale": w2_scale.contiguous(),
    }
    if x is not None:
        t["x"] = x.detach().cpu().contiguous()
        if t["x"].dtype not in (torch.float32, torch.bfloat16, torch.float16):
            t["x"] = t["x"].to(torch.float32)
    else:
        t["x_q"], t["x_scale"] = _u8(x_q), _u8(x_scale)
    if w31_bias is not None:
        b = w31_bias.detach().cpu().reshape(e, r, 1)
        t["w31_bias"] = (_to_up_gate(b, fc1_layout, n) if gated else b).reshape(e, r).to(torch.float32).contiguous()
    if w2_bias is not None:
        t["w2_bias"] = w2_bias.detach().cpu().to(torch.float32).contiguous()
    md = {"activation": activation, "chain": chain, "recipe": recipe, "ep_size": str(ep_size), "ep_rank": str(ep_rank)}
    for key, v in params.items():
        if key not in ("situ_beta", "situ_linear_beta", "swiglu_alpha", "swiglu_beta", "swiglu_limit"):
            raise TypeError("unknown parameter %r" % (key,))
        md[key] = ",".join(str(float(u)) for u in (v if isinstance(v, (list, tuple)) else [v]))
    save_file(t, path, metadata=md)
