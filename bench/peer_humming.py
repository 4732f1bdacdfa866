#!/usr/bin/env python3
"""Peer benchmark: Humming's MoE GEMMs (inclusionAI/humming), MXFP4 weights on Hopper.

Humming JIT-compiles its GEMMs with nvcc (wgmma on sm_90). Two settings:
- PEER_HUMMING_A=bf16 (default): W4A16, BF16 x; the E8M0 scales applied to
  the widened weights (group 32), as Marlin does;
- PEER_HUMMING_A=fp8: W4A8, x and the intermediate quantized per token to
  E4M3 by Humming's own humming_quant_input (one float32 scale a row).
  This is lossy by design: no kimimoe chain models it.
Each layer is a HummingMethod layer of E experts (UE8M0 weight scales,
group 32; FC biases for GPT-OSS) with Humming's default kernel configs for
its M ranges (prepare_default_kernel_configs, with is_moe, top_k and
is_moe_down); the flow around the GEMMs is peerlib's, the same as Marlin's:
moe_align_block_size at the config's block_m, GEMM1 into [M, topk, 2N],
the activation, GEMM2 with the routing weights into [M, topk, K], the slot sum.

The package comes from an installed `humming` or from HUMMING_SRC (the
folder holding the humming package); this repository holds none of its
code. HUMMING_CACHE_DIR is where Humming keeps its compiled kernels.

Environment: PEER_SHAPE, PEER_M, PEER_BUDGET_S (default 400), PEER_HUMMING_A,
OUT (the folder for peer_humming_w4a16.json or peer_humming_w4a8.json).
"""
import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402


def import_humming(rec):
    src = os.environ.get("HUMMING_SRC")
    if src:
        if not os.path.isdir(os.path.join(src, "humming")):
            sys.exit("peer_humming.py: HUMMING_SRC=%s holds no humming package" % src)
        sys.path.insert(0, src)
    try:
        import humming
        import humming.layer
    except ImportError as ex:
        sys.exit("peer_humming.py: humming is not importable (%s); install it or set HUMMING_SRC" % ex)
    rec.doc["software"]["humming_from"] = "HUMMING_SRC" if src else "installed package"
    return humming


def compile_parallel(hl, layers, kwargs_list, rec):
    """Compile every kernel config of the layers in parallel (nvcc processes),
    then let prepare_default_kernel_configs find them in Humming's cache of
    kernel objects. The configs are recorded by running the preparation once
    on stand-in layers with the kernel class replaced."""
    calls = []

    class Recorder:
        def __init__(self, **kw):
            calls.append(kw)
            self.kernel_id = len(calls)

    real = hl.HummingKernel
    hl.HummingKernel = Recorder
    try:
        for layer, kw in zip(layers, kwargs_list):
            stand_in = type("StandIn", (), {})()
            stand_in.humming_metas = layer.humming_metas
            hl.HummingMethod.prepare_default_kernel_configs(stand_in, **kw)
    finally:
        hl.HummingKernel = real
    uniq = {repr(sorted(c.items())): c for c in calls}
    t = time.time()
    real(**next(iter(uniq.values())))  # the launcher extension, built once
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(uniq))) as ex:
        list(ex.map(lambda c: real(**c), uniq.values()))
    rec.log("compiled %d Humming kernels in %.1fs" % (len(uniq), time.time() - t))


class HummingMoE:
    """Two Humming MoE layers (FC1, FC2); bind(x, ids, wts) gives the forward."""

    def __init__(self, torch, wl, w, humming, a8, rec=None):
        from humming import dtypes
        import humming.layer as hl
        self.torch, self.wl, self.a8 = torch, wl, a8
        self.a_dtype = dtypes.float8e4m3 if a8 else dtypes.bfloat16
        self.layers = []
        for name, n, k, q, s, b in (("fc1", 2 * wl.N, wl.K, w["w13"], w["w13_scale"], w["b13"]),
                                     ("fc2", wl.K, wl.N, w["w2"], w["w2_scale"], w["b2"])):
            layer = torch.nn.Module()
            # Humming's blocks are powers of two: a dimension that is not a
            # multiple of the largest is padded (GPT-OSS's 2880), as its
            # layers' pad_shape lets a serving stack do.
            n_p, k_p = -(-n // 256) * 256, -(-k // 128) * 128
            meta = hl.HummingLayerMeta(
                a_dtype=self.a_dtype, b_dtype=dtypes.float4e2m1, c_dtype=dtypes.bfloat16,
                bs_dtype=dtypes.float8e8m0, shape_n=n_p, shape_k=k_p, pad_shape_n=n_p - n,
                pad_shape_k=k_p - k, num_experts=wl.E,
                weight_scale_group_size=32, has_bias=b is not None, mma_type="wgmma")
            hl.HummingMethod.create_weights(layer, meta)
            layer.cuda()
            # The codes' bytes are Humming's packed form: element i of a word in bits 4i..4i+3.
            hl.HummingMethod.load_weight(layer, weight=q.contiguous().view(torch.int32),
                                         weight_scale=s.view(torch.float8_e8m0fnu),
                                         bias=None if b is None else b.to(torch.bfloat16), packed=True)
            hl.HummingMethod.finish_load(layer)
            self.layers.append(layer)
        kws = [dict(is_moe=True, top_k=wl.TOPK, is_moe_down=False), dict(is_moe=True, top_k=wl.TOPK, is_moe_down=True)]
        try:
            compile_parallel(hl, self.layers, kws, rec or peerlib)
        except Exception as ex:  # the serial preparation below compiles what is missing
            if rec:
                rec.note("parallel compile failed (%s: %s); compiling one at a time" % (type(ex).__name__, str(ex)[:200]))
        for layer, kw in zip(self.layers, kws):
            hl.HummingMethod.prepare_default_kernel_configs(layer, **kw)
        self.hm = hl.HummingMethod
        self.align = peerlib.Aligner(torch)
        self.quant = torch.ops.humming.humming_quant_input if a8 else None

    def block_m(self, m):
        cfg = self.layers[0].humming_block_size_configs[""]
        for i in range(0, len(cfg), 3):
            if cfg[i] <= m <= cfg[i + 1]:
                return cfg[i + 2]
        raise ValueError("M=%d is in no Humming config range %s" % (m, cfg))

    def bind(self, x, ids, wts):
        torch, wl = self.torch, self.wl
        m = x.shape[0]
        block = self.block_m(m)
        c1 = torch.empty((m, wl.TOPK, 2 * wl.N), dtype=torch.bfloat16, device=x.device)
        a = torch.empty((m * wl.TOPK, wl.N), dtype=torch.bfloat16, device=x.device)
        c2 = torch.empty((m, wl.TOPK, wl.K), dtype=torch.bfloat16, device=x.device)
        out = torch.empty((m, wl.K), dtype=torch.bfloat16, device=x.device)
        up, down = self.layers

        def fwd():
            sorted_ids, expert_ids, post = self.align(ids, block, wl.E)
            xin, xs = (self.quant(x, "float8e4m3", None, None)) if self.a8 else (x, None)
            self.hm.forward_layer(up, inputs=xin, outputs=c1, input_scale=xs, topk_weights=wts,
                                  sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=post)
            peerlib.activation(torch, wl.oai, c1.view(m * wl.TOPK, 2 * wl.N), wl.N, out=a)
            if self.a8:
                aq, as_ = self.quant(a, "float8e4m3", None, None)
                ain, ascale = aq.view(m, wl.TOPK, wl.N), as_.view(m, wl.TOPK, 1)
            else:
                ain, ascale = a.view(m, wl.TOPK, wl.N), None
            self.hm.forward_layer(down, inputs=ain, outputs=c2, input_scale=ascale, topk_weights=wts,
                                  sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=post)
            torch.sum(c2, dim=1, out=out)
            return out

        fwd.out, fwd.block = out, block
        return fwd


def main():
    import torch
    wl = peerlib.Workload()
    a8 = os.environ.get("PEER_HUMMING_A", "bf16") == "fp8"
    tag = "w4a8" if a8 else "w4a16"
    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    rec = peerlib.Record("Humming " + tag.upper(), "Humming", wl, os.path.join(out_dir, "peer_humming_%s.json" % tag))
    if not torch.cuda.is_available():
        rec.note("no CUDA device; nothing to do")
        return
    rec.device(torch)
    humming = import_humming(rec)
    if a8:
        rec.doc["workload"]["activations"] = ("x and the intermediate quantized per token to E4M3 (humming_quant_input), "
                                              "BF16 rows per slot, BF16 output")
    peerlib.prepare_and_sweep(torch, rec, wl, lambda w: HummingMoE(torch, wl, w, humming, a8, rec),
                              "Humming's prepare_default_kernel_configs: the config's block_m for M's range", 400)


if __name__ == "__main__":
    main()
