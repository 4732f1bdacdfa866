#!/usr/bin/env python3
"""Peer benchmark: vLLM's Marlin MXFP4 MoE (moe_wna16_marlin_gemm), W4A16 on Hopper.

The flow is vLLM's fused_marlin_moe, which SGLang's Marlin runner for
Kimi-K3 on H200 also follows (`--moe-runner-backend marlin`):
- the weights prepared as vLLM's prepare_moe_mxfp4_layer_for_marlin does:
  each expert's codes repacked by gptq_marlin_repack (4 bits, no act order),
  the E8M0 scales taken to BF16, permuted in groups of 64 columns
  (marlin_permute_scales, group 32), their pairs reordered [0, 2, 1, 3] for
  the BF16 dequantization and cast back to E8M0, the biases permuted in
  groups of 8 (marlin_permute_bias) and held in BF16;
- moe_align_block_size with block_size_m the first of 8, 16, 32, 48, 64
  for which M * topk / E / block_size_m < 0.9 (fused_marlin_moe's rule);
- GEMM1 with use_fp32_reduce, BF16 out; the activation (peerlib.activation);
- GEMM2 with the routing weights multiplied in its epilogue (top_k 1,
  mul_topk_weights), BF16 rows per slot; the sum over the slots.
On sm_90 Marlin's MXFP4 path takes BF16 activations only (its FP8-activation
instances are generated for sm_89 and sm_120 alone).

The op comes from the user's vLLM (`import vllm._moe_C`, `vllm._C`) or from
shared libraries the user built from vLLM's csrc/moe/marlin_moe_wna16 and
csrc/quantization/marlin, named in MARLIN_OPS (colon-separated; they must
register torch.ops._moe_C.moe_wna16_marlin_gemm and
torch.ops._C.gptq_marlin_repack under vLLM's schemas, and may register
_moe_C.moe_align_block_size). This repository builds none of them.

Environment: PEER_SHAPE (kimi, gpt-oss-120b, gpt-oss-20b), PEER_M,
PEER_BUDGET_S (default 240), PEER_BLOCK_M (force block_size_m), OUT (the
folder for peer_marlin.json).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402

# vLLM's ScalarType id of float4_e2m1f (exponent 2, mantissa 1, signed,
# bias 0, finite values only, no NaN): the fields packed as ScalarType.id does.
FLOAT4_E2M1F_ID = 2 | 1 << 8 | 1 << 16 | 1 << 49


def load_ops(torch, rec):
    """Register the Marlin ops from MARLIN_OPS, else from an installed vLLM."""
    libs = [p for p in os.environ.get("MARLIN_OPS", "").split(":") if p]
    if libs:
        for p in libs:
            torch.ops.load_library(p)
        rec.doc["peer_version"] = "vLLM Marlin MoE from MARLIN_OPS"
        rec.doc["software"]["marlin_ops"] = [os.path.basename(p) for p in libs]
    else:
        try:
            import vllm  # noqa: F401
            import vllm._C  # noqa: F401
            import vllm._moe_C  # noqa: F401
        except ImportError as ex:
            sys.exit("peer_marlin.py: neither MARLIN_OPS nor an installed vLLM (%s)" % ex)
        rec.doc["peer_version"] = "vLLM %s Marlin MoE" % vllm.__version__
    for op in ("_moe_C.moe_wna16_marlin_gemm", "_C.gptq_marlin_repack"):
        ns, name = op.split(".")
        try:
            getattr(getattr(torch.ops, ns), name)
        except (AttributeError, RuntimeError):
            sys.exit("peer_marlin.py: torch.ops.%s is not registered by %s" % (op, libs or "vLLM"))


def scale_perms():
    """marlin_permute_scales' two column orders (groups of 64 and of 8)."""
    perm = [i + 8 * j for i in range(8) for j in range(8)]
    single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return perm, single


class MarlinMoE:
    """One MXFP4 MoE layer in Marlin's form; bind(x, ids, wts) gives the forward."""

    def __init__(self, torch, wl, w, fc1_rows=None):
        self.torch, self.wl = torch, wl
        dev = w["w13"].device
        self.ws = torch.zeros(torch.cuda.get_device_properties(dev).multi_processor_count * 4,
                              dtype=torch.int32, device=dev)
        empty = torch.empty(0, dtype=torch.int32, device=dev)
        perm, single = scale_perms()

        def repack(q, size_n, size_k):
            out = []
            for e in range(wl.E):
                qw = q[e].contiguous().view(torch.int32).T.contiguous()  # [K/8, N] int32
                out.append(torch.ops._C.gptq_marlin_repack(qw, empty, size_k, size_n, 4, False))
            return torch.stack(out)

        def scales(s, size_n, size_k):
            out = []
            for e in range(wl.E):
                t = s[e].view(torch.float8_e8m0fnu).to(torch.bfloat16).T  # [K/32, N]
                t = t.reshape(-1, len(perm))[:, perm].reshape(-1, size_n)  # group 32 < K: the 64-column order
                t = t.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(t.shape[0], -1)  # the BF16 dequant's pair order
                out.append(t.to(torch.float8_e8m0fnu).contiguous())
            return torch.stack(out)

        def bias(b):
            if b is None:
                return None
            return b.to(torch.bfloat16).reshape(-1, len(single))[:, single].reshape(b.shape).contiguous()

        n2 = 2 * wl.N
        self.w1 = repack(w["w13"], n2, wl.K)
        self.w2 = repack(w["w2"], wl.K, wl.N)
        self.s1 = scales(w["w13_scale"], n2, wl.K)
        self.s2 = scales(w["w2_scale"], wl.K, wl.N)
        self.b1, self.b2 = bias(w["b13"]), bias(w["b2"])
        self.align = peerlib.Aligner(torch)

    def block_m(self, m):
        forced = int(os.environ.get("PEER_BLOCK_M", "0") or 0)
        if forced:
            return forced
        for b in (8, 16, 32, 48, 64):
            if m * self.wl.TOPK / self.wl.E / b < 0.9:
                return b
        return 64

    def bind(self, x, ids, wts):
        """The forward for these inputs, its buffers allocated once (a graph replays it)."""
        torch, wl = self.torch, self.wl
        m = x.shape[0]
        block = self.block_m(m)
        c1 = torch.empty((m * wl.TOPK, 2 * wl.N), dtype=torch.bfloat16, device=x.device)
        a = torch.empty((m * wl.TOPK, wl.N), dtype=torch.bfloat16, device=x.device)
        c2 = torch.empty((m * wl.TOPK, wl.K), dtype=torch.bfloat16, device=x.device)
        out = torch.empty((m, wl.K), dtype=torch.bfloat16, device=x.device)
        gemm = torch.ops._moe_C.moe_wna16_marlin_gemm

        def fwd():
            sorted_ids, expert_ids, post = self.align(ids, block, wl.E)
            gemm(x, c1, self.w1, self.b1, self.s1, None, None, None, None, None, self.ws,
                 sorted_ids, expert_ids, post, wts, block, wl.TOPK, False, FLOAT4_E2M1F_ID,
                 m, 2 * wl.N, wl.K, True, False, True, False, -1, -1, -1)
            peerlib.activation(torch, wl.oai, c1, wl.N, out=a)
            gemm(a, c2, self.w2, self.b2, self.s2, None, None, None, None, None, self.ws,
                 sorted_ids, expert_ids, post, wts, block, 1, True, FLOAT4_E2M1F_ID,
                 m * wl.TOPK, wl.K, wl.N, True, False, True, False, -1, -1, -1)
            torch.sum(c2.view(m, wl.TOPK, wl.K), dim=1, out=out)
            return out

        fwd.out, fwd.block = out, block
        return fwd


def main():
    import torch
    wl = peerlib.Workload()
    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    rec = peerlib.Record("Marlin", "vLLM Marlin MoE", wl, os.path.join(out_dir, "peer_marlin.json"))
    if not torch.cuda.is_available():
        rec.note("no CUDA device; nothing to do")
        return
    rec.device(torch)
    load_ops(torch, rec)
    rule = ("PEER_BLOCK_M=%s" % os.environ["PEER_BLOCK_M"]) if os.environ.get("PEER_BLOCK_M") \
        else "fused_marlin_moe: the first of 8, 16, 32, 48, 64 with M*topk/E/block < 0.9, else 64"
    peerlib.prepare_and_sweep(torch, rec, wl, lambda w: MarlinMoE(torch, wl, w), rule, 240)


if __name__ == "__main__":
    main()
