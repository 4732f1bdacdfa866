#!/usr/bin/env python3
"""End-to-end interop check on a GPU machine (torch, safetensors, transformers).

Run from the repository root with the kimimoe command on PATH (or named
by $KIMIMOE):

    OUT=out python3 python/interop_e2e.py

A. GPT-OSS layout: a small layer in GPT-OSS's checkpoint layout (stacked
   MXFP4 blocks, interleaved gate/up, bf16 biases) is written as a
   checkpoint; transformers' own MXFP4 dequantization
   (transformers.integrations.mxfp4.convert_moe_packed_tensors) and its
   GptOssExperts module compute the layer in float32, and a float64 torch
   computation on the same dequantized weights gives a second reference.
   `kimimoe case --checkpoint` builds the case (exact chain: x is given
   already in MXFP8, so nothing is requantized), `kimimoe check` compares
   each candidate. This checks kimimoe's reading of the GPT-OSS layout
   against transformers'.
B. A serving stack's tensors: FlashInfer-style swizzled scales and a
   checkpoint's [gate; up] FC1, written with the python/ helper's dump_case; a
   float64 torch reference is the candidate; a candidate computed with gate
   and up swapped must fail.

Writes $OUT/interop_log.txt and the check reports ($OUT/check_*.json).
"""
import json
import math
import os
import subprocess
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimimoe import dump_case as write_case  # noqa: E402

OUT = os.environ.get("OUT", "interop_out")
os.makedirs(OUT, exist_ok=True)
WORK = os.path.join(OUT, "work")
os.makedirs(WORK, exist_ok=True)
LOG = open(os.path.join(OUT, "interop_log.txt"), "w")
BIN = os.environ.get("KIMIMOE", "kimimoe")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)


def e4m3_values():
    v = torch.zeros(256, dtype=torch.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            v[c] = float("nan")
            continue
        x = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[c] = -x if s else x
    return v


E4M3 = e4m3_values()


def dequant_fp4(packed, scales):
    """packed uint8 [..., R, C/2] (low nibble first), scales [..., R, C/32] -> float64 [..., R, C]."""
    lo, hi = (packed & 15).long(), (packed >> 4).long()
    v = torch.stack([FP4[lo], FP4[hi]], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
    sc = torch.pow(2.0, scales.double() - 127).repeat_interleave(32, dim=-1)
    return v * sc


def random_mx8(m, k, g):
    codes = torch.randint(0, 256, (m, k), generator=g, dtype=torch.int64)
    codes[(codes & 0x7F) == 0x7F] = 0x30  # no NaN codes
    scales = torch.randint(122, 130, (m, k // 32), generator=g, dtype=torch.int64)
    x = E4M3[codes] * torch.pow(2.0, scales.double() - 127).repeat_interleave(32, dim=-1)
    return codes.to(torch.uint8), scales.to(torch.uint8), x


def run(args, expect):
    p = subprocess.run([BIN] + args, capture_output=True, text=True)
    log("$ kimimoe " + " ".join(args))
    log(p.stdout.strip())
    if p.stderr.strip():
        log(p.stderr.strip())
    ok = p.returncode == expect
    log("exit %d (expected %d): %s" % (p.returncode, expect, "as expected" if ok else "UNEXPECTED"))
    return ok


def part_a(g):
    log("== A. GPT-OSS layout against transformers")
    import transformers
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    log("transformers", transformers.__version__, "torch", torch.__version__)
    E, K, N, M, TOPK = 4, 160, 96, 6, 2
    gu_blocks = torch.randint(0, 256, (E, 2 * N, K // 32, 16), generator=g, dtype=torch.int64).to(torch.uint8)
    gu_scales = torch.randint(124, 130, (E, 2 * N, K // 32), generator=g, dtype=torch.int64).to(torch.uint8)
    d_blocks = torch.randint(0, 256, (E, K, N // 32, 16), generator=g, dtype=torch.int64).to(torch.uint8)
    d_scales = torch.randint(120, 126, (E, K, N // 32), generator=g, dtype=torch.int64).to(torch.uint8)
    gu_bias = (torch.randn(E, 2 * N, generator=g) * 0.5).to(torch.bfloat16)
    d_bias = (torch.randn(E, K, generator=g) * 0.1).to(torch.bfloat16)
    ck = os.path.join(WORK, "gptoss_ckpt")
    os.makedirs(ck, exist_ok=True)
    p = "model.layers.0.mlp.experts."
    save_file({p + "gate_up_proj_blocks": gu_blocks, p + "gate_up_proj_scales": gu_scales, p + "gate_up_proj_bias": gu_bias,
               p + "down_proj_blocks": d_blocks, p + "down_proj_scales": d_scales, p + "down_proj_bias": d_bias},
              os.path.join(ck, "model.safetensors"))

    def tf_dequant(blocks, scales, rows, cols):
        w = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).double()
        # Some versions return [E, rows, cols], others the transpose.
        if tuple(w.shape[1:]) == (rows, cols):
            w = w.transpose(1, 2)
        assert tuple(w.shape[1:]) == (cols, rows), w.shape
        return w  # [E, in, out], as GptOssExperts' parameters

    w_gu = tf_dequant(gu_blocks, gu_scales, 2 * N, K)   # [E, K, 2N]
    w_d = tf_dequant(d_blocks, d_scales, K, N)          # [E, N, K]
    # Our own dequantization must agree with transformers' (a direct check
    # of the reading of blocks, nibbles and scales).
    ours = dequant_fp4(gu_blocks.reshape(E, 2 * N, K // 2), gu_scales).transpose(1, 2)
    log("dequantization, kimimoe's rule vs transformers': max |diff| %g" % (ours - w_gu).abs().max().item())

    xq, xs, x = random_mx8(M, K, g)
    logits = torch.randn(M, E, generator=g, dtype=torch.float64)
    top = torch.topk(logits, TOPK, dim=-1)
    ids, wts = top.indices, torch.softmax(top.values, dim=-1)
    save_file({"x_q": xq, "x_scale": xs, "router_logits": logits.to(torch.float32)}, os.path.join(WORK, "gptoss_inputs.safetensors"))

    alpha, limit = 1.702, 7.0
    b1, b2 = gu_bias.double(), d_bias.double()

    def forward(ids, wts):
        out = torch.zeros(M, K, dtype=torch.float64)
        for t in range(M):
            for j in range(TOPK):
                e = int(ids[t, j])
                h = x[t] @ w_gu[e] + b1[e]
                gate, up = h[0::2].clamp(max=limit), h[1::2].clamp(-limit, limit)
                a = (up + 1) * (gate * torch.sigmoid(gate * alpha))
                out[t] += float(wts[t, j]) * (a @ w_d[e] + b2[e])
        return out

    out64 = forward(ids, wts)
    save_file({"out": out64.to(torch.float32)}, os.path.join(WORK, "gptoss_cand_torch64.safetensors"))

    cands = ["gptoss_cand_torch64.safetensors"]
    try:
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
        cfg = GptOssConfig(hidden_size=K, intermediate_size=N, num_local_experts=E, num_experts_per_tok=TOPK)
        ex = GptOssExperts(cfg).to(torch.float32)
        with torch.no_grad():
            ex.gate_up_proj.copy_(w_gu.float())
            ex.gate_up_proj_bias.copy_(b1.float())
            ex.down_proj.copy_(w_d.float())
            ex.down_proj_bias.copy_(b2.float())
        ex.eval()
        dense = torch.zeros(M, E, dtype=torch.float32)
        dense.scatter_(1, ids, wts.float())
        # The module's call changed across transformers versions: try the
        # known forms; the result is used only if it matches the float64
        # reference (a wrong form cannot pass silently).
        y, used = None, None
        for name, call in [
            ("(x[T,H], top_k_index, top_k_weights)", lambda: ex(x.float(), ids, wts.float())),
            ("(x[T,H], router_indices=, routing_weights=dense)", lambda: ex(x.float(), router_indices=ids, routing_weights=dense)),
            ("(x[1,T,H], router_indices=, routing_weights=dense)", lambda: ex(x.float().unsqueeze(0), router_indices=ids, routing_weights=dense)),
        ]:
            try:
                with torch.no_grad():
                    r = call()
                r = r[0] if isinstance(r, tuple) else r
                if r.numel() == M * K:
                    y, used = r.reshape(M, K).float(), name
                    break
                log("GptOssExperts%s gave shape %s" % (name, tuple(r.shape)))
            except Exception as e:
                log("GptOssExperts%s: %r" % (name, e))
        if y is None:
            raise RuntimeError("no call form of GptOssExperts worked")
        log("GptOssExperts called as", used)
        save_file({"out": y.contiguous()}, os.path.join(WORK, "gptoss_cand_transformers.safetensors"))
        log("transformers GptOssExperts float32 vs the float64 torch reference: max |diff| %g" % (y.double() - out64).abs().max().item())
        cands.append("gptoss_cand_transformers.safetensors")
    except Exception as e:  # report, do not hide
        log("GptOssExperts could not be run: %r" % (e,))

    ok = run(["case", "--checkpoint", ck, "--layer", "0", "--inputs", os.path.join(WORK, "gptoss_inputs.safetensors"),
              "--topk", str(TOPK), "--chain", "exact", "--out", os.path.join(WORK, "gptoss_case.safetensors")], 0)
    if ok:
        # The golden reference uses the routing kimimoe stored in the case
        # (float32 weights), so that only the layer's arithmetic differs.
        from safetensors.torch import load_file
        cs = load_file(os.path.join(WORK, "gptoss_case.safetensors"))
        same = bool((cs["topk_ids"].long() == ids).all())
        log("kimimoe's GPT-OSS routing of the logits picks the same experts as torch.topk: %s; weights max |diff| %g"
            % (same, (cs["topk_weights"].double() - wts).abs().max().item()))
        ok &= same
        golden(os.path.join(WORK, "gptoss_case.safetensors"), forward(cs["topk_ids"].long(), cs["topk_weights"].double()),
               "golden_gptoss_biases.safetensors")
    for c in cands:
        ok &= run(["check", "--case", os.path.join(WORK, "gptoss_case.safetensors"), "--candidate", os.path.join(WORK, c),
                   "--json", os.path.join(OUT, "check_" + c.replace(".safetensors", ".json"))], 0)
    return ok


def golden(case_path, ref64, name):
    """The case file kimimoe wrote, plus the float64 torch reference as
    "out_ref_f64": a golden case for kimimoe's tests."""
    from safetensors import safe_open
    t = {}
    with safe_open(case_path, framework="pt") as f:
        md = f.metadata()
        for k in f.keys():
            t[k] = f.get_tensor(k)
    t["out_ref_f64"] = ref64.to(torch.float64).contiguous()
    save_file(t, os.path.join(OUT, name), metadata=md)
    log("wrote", name)


def swizzle_scales(lin):
    rows, cols = lin.shape
    rp, cp = (rows + 127) // 128 * 128, (cols + 3) // 4 * 4
    n_k = cp // 4
    sw = torch.zeros(rp * cp, dtype=torch.uint8)
    m = torch.arange(rows).view(-1, 1)
    k = torch.arange(cols).view(1, -1)
    off = (m // 128) * (n_k * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4
    sw[off.reshape(-1)] = lin.reshape(-1)
    return sw


def part_b(g):
    log("== B. serving-stack tensors through kimimoe.dump_case")
    E, K, N, M, TOPK = 4, 256, 128, 5, 2
    w13 = torch.randint(0, 256, (E, 2 * N, K // 2), generator=g, dtype=torch.int64).to(torch.uint8)  # [gate; up]
    s13 = torch.randint(119, 123, (E, 2 * N, K // 32), generator=g, dtype=torch.int64).to(torch.uint8)
    w2 = torch.randint(0, 256, (E, K, N // 2), generator=g, dtype=torch.int64).to(torch.uint8)
    s2 = torch.randint(118, 122, (E, K, N // 32), generator=g, dtype=torch.int64).to(torch.uint8)
    xq, xs, x = random_mx8(M, K, g)
    ids = torch.stack([torch.randperm(E, generator=g)[:TOPK] for _ in range(M)])
    wts = torch.rand(M, TOPK, generator=g, dtype=torch.float64) + 0.1
    wts = wts / wts.sum(-1, keepdim=True)
    W13, W2 = dequant_fp4(w13, s13), dequant_fp4(w2, s2)

    def reference(swap, f64=False):
        out = torch.zeros(M, K, dtype=torch.float64)
        for t in range(M):
            for j in range(TOPK):
                e = int(ids[t, j])
                h = W13[e] @ x[t]
                gate, up = (h[N:], h[:N]) if swap else (h[:N], h[N:])
                a = 4 * torch.tanh(gate / 4) * torch.sigmoid(gate) * (25 * torch.tanh(up / 25))
                out[t] += float(wts.float()[t, j]) * (W2[e] @ a)
        return out if f64 else out.to(torch.float32)

    sw13 = torch.stack([swizzle_scales(s) for s in s13])
    sw2 = torch.stack([swizzle_scales(s) for s in s2])
    case = os.path.join(WORK, "stack_case.safetensors")
    write_case(case, x_q=xq, x_scale=xs, topk_ids=ids, topk_weights=wts.float(), w31=w13, w31_scale=sw13,
               w2=w2, w2_scale=sw2, activation="situ", situ_beta=4, situ_linear_beta=25, chain="exact",
               fc1_layout="gate_up", scale_layout="swizzled")
    save_file({"out": reference(False)}, os.path.join(WORK, "stack_cand.safetensors"))
    golden(case, reference(False, True), "golden_kimi_gate_up_swizzled.safetensors")
    save_file({"out": reference(True)}, os.path.join(WORK, "stack_cand_swapped.safetensors"))
    ok = run(["check", "--case", case, "--candidate", os.path.join(WORK, "stack_cand.safetensors"),
              "--json", os.path.join(OUT, "check_stack.json")], 0)
    ok &= run(["check", "--case", case, "--candidate", os.path.join(WORK, "stack_cand_swapped.safetensors")], 1)
    return ok


def main():
    g = torch.Generator().manual_seed(2026)
    ok = True
    for part in (part_a, part_b):
        try:
            ok &= part(g)
        except Exception as e:
            import traceback
            log("FAILED with an exception: %r" % (e,))
            log(traceback.format_exc())
            ok = False
    log("interop e2e: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
