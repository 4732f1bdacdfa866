"""What the W4A16 peer scripts share: the workload, the routing metadata,
the activation between the GEMMs, the timing and the JSON they write.

bench/peer_marlin.py and bench/peer_humming.py run a production MXFP4 MoE
the way a serving stack calls it on Hopper: moe_align_block_size, GEMM1,
the activation in torch (float32 arithmetic, stored as BF16, as vLLM's and
SGLang's activation kernels compute it), GEMM2 with the routing weights in
its epilogue, then the sum over the slots (torch.sum of the BF16 rows, a
float32 accumulation rounded once). The GEMMs are the peer's; everything
around them is here, so the two peers differ only in their GEMMs.

The workload is the one bench/peer_triton_kernels.py times, so the peers'
rows sit beside each other: the Kimi-K3 EP32 rank-7 shape (28 local
experts, K 3584, N 3072, 8 local slots a token) or a GPT-OSS layer
(PEER_SHAPE), random MXFP4 codes with E8M0 scales 2^-9 .. 2^-5, x N(0, 1)
in BF16, each token's slots distinct experts drawn uniformly, the routing
weights a softmax of Gaussian logits.

Nothing here imports torch at module load, so CI can parse and import it.
"""
import datetime
import json
import os
import sys
import time

SHAPES = {"kimi": (28, 3584, 3072, 8), "gpt-oss-120b": (128, 2880, 2880, 4), "gpt-oss-20b": (32, 2880, 2880, 4)}
M_DEFAULT = [1, 2, 4, 8, 16, 32, 128, 256, 512, 1024, 2048, 8192]
SEED = 20240607
SITU_BETA, SITU_LINEAR_BETA = 4.0, 25.0       # Kimi-K3's SiTU
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0         # GPT-OSS's clamped SwiGLU (beta 1)
FLUSH_BYTES = 256 << 20                         # larger than the H200's 60 MB L2


def env_list(name, default):
    v = os.environ.get(name)
    if not v:
        return list(default)
    return [int(x) for x in v.replace(" ", "").split(",") if x]


class Workload:
    """The layer a peer runs: PEER_SHAPE (kimi, gpt-oss-120b, gpt-oss-20b)
    and PEER_E, PEER_K, PEER_N, PEER_TOPK overriding one value. Kimi's FC1
    rows are the checkpoint's [gate; up] halves; GPT-OSS's are interleaved
    (gate0, up0, gate1, ...) with FC biases, as their checkpoints hold them."""

    def __init__(self, shape=None):
        self.shape = shape or os.environ.get("PEER_SHAPE", "kimi")
        if self.shape not in SHAPES:
            sys.exit("PEER_SHAPE=%s: want one of %s" % (self.shape, ", ".join(SHAPES)))
        e, k, n, topk = SHAPES[self.shape]
        self.E = int(os.environ.get("PEER_E", e))
        self.K = int(os.environ.get("PEER_K", k))
        self.N = int(os.environ.get("PEER_N", n))
        self.TOPK = int(os.environ.get("PEER_TOPK", topk))
        self.oai = self.shape.startswith("gpt-oss")
        self.bias = self.oai

    def describe(self):
        return {
            "shape": self.shape, "E_local": self.E, "K_hidden": self.K, "N_intermediate": self.N,
            "topk_local": self.TOPK,
            "fc1_weight": "[E, 2N, K] MXFP4 (E2M1, E8M0 scale per 32 along K), rows %s"
                          % ("gate/up interleaved" if self.oai else "[gate; up]"),
            "fc2_weight": "[E, K, N] MXFP4 (E2M1, E8M0 scale per 32 along N)",
            "activations": "BF16 x, BF16 between the GEMMs, BF16 rows per slot, BF16 output",
            "activation_fn": ("clamped SwiGLU (alpha %g, limit %g, beta 1)" % (SWIGLU_ALPHA, SWIGLU_LIMIT))
                             if self.oai else ("SiTU(%g, %g)" % (SITU_BETA, SITU_LINEAR_BETA)),
            "bias": "FC1 [E, 2N] and FC2 [E, K], BF16 values" if self.bias else None,
            "routing": "seeded uniform: TOPK distinct experts of E a token; weights softmax of Gaussian logits (float32)",
        }


def make_weights(torch, wl, dev, seed=SEED):
    """Random MXFP4 weights in the checkpoint's form: codes [E, rows, cols/2]
    U8 (element 2j in the low nibble) and E8M0 scales [E, rows, cols/32] U8,
    plus BF16-valued float32 biases for GPT-OSS."""
    gen = torch.Generator(device=dev).manual_seed(seed)

    def mxfp4(rows, cols):
        q = torch.empty((wl.E, rows, cols // 2), dtype=torch.uint8, device=dev)
        s = torch.empty((wl.E, rows, cols // 32), dtype=torch.uint8, device=dev)
        for e in range(wl.E):
            q[e] = torch.randint(0, 256, q.shape[1:], device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
            s[e] = torch.randint(118, 123, s.shape[1:], device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
        return q, s

    w = {}
    w["w13"], w["w13_scale"] = mxfp4(2 * wl.N, wl.K)
    w["w2"], w["w2_scale"] = mxfp4(wl.K, wl.N)
    w["b13"] = w["b2"] = None
    if wl.bias:  # BF16 values: the kernels hold their biases in BF16
        w["b13"] = (torch.randn((wl.E, 2 * wl.N), device=dev, generator=gen) * 0.5).to(torch.bfloat16).float()
        w["b2"] = (torch.randn((wl.E, wl.K), device=dev, generator=gen) * 0.5).to(torch.bfloat16).float()
    return w


def make_inputs(torch, wl, m, dev, seed=SEED):
    """x [m, K] BF16, topk_ids [m, TOPK] int32 (distinct local experts), topk_weights [m, TOPK] float32."""
    g = torch.Generator(device=dev).manual_seed(seed + m)
    x = torch.randn((m, wl.K), device=dev, generator=g).to(torch.bfloat16)
    ids = torch.rand((m, wl.E), device=dev, generator=g).argsort(dim=1)[:, :wl.TOPK].to(torch.int32).contiguous()
    wts = torch.softmax(torch.randn((m, wl.TOPK), device=dev, generator=g), dim=-1)
    return x, ids, wts


def activation(torch, wl_oai, h, n, out=None):
    """The gated activation between the GEMMs: h [rows, 2N] BF16 -> [rows, N]
    BF16, computed in float32. Kimi: SiTU on [gate; up] halves; GPT-OSS: the
    clamped SwiGLU on interleaved rows (vLLM's swigluoai_and_mul)."""
    hf = h.float()
    if wl_oai:
        g = hf[:, 0::2].clamp(max=SWIGLU_LIMIT)
        u = hf[:, 1::2].clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
        a = g * torch.sigmoid(SWIGLU_ALPHA * g) * (u + 1.0)
    else:
        g, u = hf[:, :n], hf[:, n:]
        a = SITU_BETA * torch.tanh(g / SITU_BETA) * torch.sigmoid(g) * (SITU_LINEAR_BETA * torch.tanh(u / SITU_LINEAR_BETA))
    if out is None:
        return a.to(torch.bfloat16)
    out.copy_(a)
    return out


class Aligner:
    """moe_align_block_size as vLLM calls it (fused_marlin_moe): the slots
    sorted by expert, each expert's run padded to the block size with the
    sentinel M*topk, the block's expert, and the padded count. It uses the
    CUDA op of the library the user gave (torch.ops._moe_C) when there is
    one, else the same result from torch (more launches: say so)."""

    def __init__(self, torch):
        self.torch = torch
        try:
            self.op = torch.ops._moe_C.moe_align_block_size
        except (AttributeError, RuntimeError):
            self.op = None
        self.kind = "vLLM's moe_align_block_size CUDA op" if self.op is not None else "torch (the op was not found)"

    def __call__(self, ids, block, n_experts):
        torch = self.torch
        numel = ids.numel()
        padded = numel + n_experts * (block - 1)
        if numel < n_experts:
            padded = min(numel * block, padded)
        sorted_ids = torch.empty((padded,), dtype=torch.int32, device=ids.device)
        blocks = (padded + block - 1) // block
        expert_ids = torch.empty((blocks,), dtype=torch.int32, device=ids.device)
        post = torch.empty((1,), dtype=torch.int32, device=ids.device)
        if self.op is not None:
            self.op(ids, n_experts, block, sorted_ids, expert_ids, post, None)
            return sorted_ids, expert_ids, post
        # No op here reads a device value on the host, so a CUDA graph can
        # capture it (bincount and repeat_interleave would).
        flat = ids.reshape(-1).long()
        dev = ids.device
        counts = torch.zeros(n_experts, dtype=torch.long, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
        pcounts = (counts + block - 1) // block * block
        ends = torch.cumsum(pcounts, 0)
        order = torch.argsort(flat, stable=True)
        rank = torch.arange(numel, device=dev) - (torch.cumsum(counts, 0) - counts)[flat[order]]
        sorted_ids.fill_(numel)
        sorted_ids[(ends - pcounts)[flat[order]] + rank] = order.to(torch.int32)
        starts = torch.arange(blocks, device=dev) * block
        bexp = torch.searchsorted(ends, starts, right=True)
        expert_ids.copy_(torch.where(bexp < n_experts, bexp, -1).to(torch.int32))
        post.copy_(ends[-1:].to(torch.int32))
        return sorted_ids, expert_ids, post


class Timer:
    """CUDA-event timings of one forward with L2 flushed before each: eager
    (the Python calls each time) and the forward captured once in a CUDA
    graph (median of replays), as bench/peer_triton_kernels.py times."""

    def __init__(self, torch):
        self.torch = torch
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")

    def _median(self, fn, n):
        torch = self.torch
        st = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        en = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush.zero_()
            st[i].record()
            fn()
            en[i].record()
        torch.cuda.synchronize()
        t = sorted(a.elapsed_time(b) for a, b in zip(st, en))
        return float(t[len(t) // 2])

    def eager(self, fn, n=50):
        fn()
        return self._median(fn, n)

    def graph(self, fn, n=None):
        """(median ms, the graph): n replays, by default about 100 ms of them."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        if n is None:
            est = max(self._median(g.replay, 5), 1e-3)
            n = int(min(2000, max(20, 100.0 / est)))
        return self._median(g.replay, n), g


class Record:
    """The peer's JSON (the fields kimimoe compare and plot read, as the
    other peer scripts write them), rewritten whole after each step."""

    def __init__(self, name, version, wl, path, timing_note=""):
        self.t0 = time.time()
        self.path = path
        self.doc = {
            "peer": name, "peer_version": version,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": None, "software": {}, "workload": wl.describe(),
            "timing": {
                "graph_ms": "the forward captured once in a torch.cuda.CUDAGraph; median of replays, L2 flushed "
                            "(256 MB memset) before every replay, CUDA events around the replay only" + timing_note,
                "eager_ms": "the same forward called from Python, L2 flushed before each call; median of 50",
            },
            "rows": [], "notes": [],
        }

    def device(self, torch):
        p = torch.cuda.get_device_properties(0)
        self.doc["device"] = "%s (sm_%d%d, %d SMs, %.0f GiB)" % (
            p.name, p.major, p.minor, p.multi_processor_count, p.total_memory / 2**30)
        self.doc["software"].update({"python": sys.version.split()[0], "torch": torch.__version__,
                                     "cuda": torch.version.cuda})

    def log(self, *a):
        print("[%7.1fs] %s" % (time.time() - self.t0, " ".join(str(x) for x in a)), flush=True)

    def note(self, msg):
        self.log("NOTE:", msg)
        self.doc["notes"].append(msg)
        self.write()

    def write(self):
        self.doc["elapsed_s"] = round(time.time() - self.t0, 1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.path)


def dequant(torch, q, s):
    """MXFP4 codes [..., R, C/2] and E8M0 scales [..., R, C/32] -> float32 [..., R, C] (for rel_err only)."""
    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                       device=q.device)
    v = torch.stack([lut[(q & 0xF).long()], lut[(q >> 4).long()]], dim=-1).flatten(-2)
    v = v.unflatten(-1, (v.shape[-1] // 32, 32)) * torch.exp2(s.float() - 127.0).unsqueeze(-1)
    return v.flatten(-2)


def reference(torch, wl, w, x, ids, wts):
    """float32 torch on the dequantized weights, no intermediate rounding:
    the rel_err each row reports (kimimoe check is the exact comparison)."""
    y = torch.zeros((x.shape[0], wl.K), dtype=torch.float32, device=x.device)
    for e in range(wl.E):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x[tok].float() @ dequant(torch, w["w13"][e], w["w13_scale"][e]).t()
        if w["b13"] is not None:
            h = h + w["b13"][e]
        a = _act32(torch, wl, h)
        o = a @ dequant(torch, w["w2"][e], w["w2_scale"][e]).t()
        if w["b2"] is not None:
            o = o + w["b2"][e]
        y.index_add_(0, tok, o * wts[tok, slot].float().unsqueeze(1))
    return y


def _act32(torch, wl, h):
    if wl.oai:
        g = h[:, 0::2].clamp(max=SWIGLU_LIMIT)
        u = h[:, 1::2].clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
        return g * torch.sigmoid(SWIGLU_ALPHA * g) * (u + 1.0)
    g, u = h[:, :wl.N], h[:, wl.N:]
    return SITU_BETA * torch.tanh(g / SITU_BETA) * torch.sigmoid(g) * (SITU_LINEAR_BETA * torch.tanh(u / SITU_LINEAR_BETA))


def sweep(torch, rec, timer, moe, wl, w, ms, budget_s, check_m=(1, 8, 32, 256, 2048)):
    """Time moe.forward at each M into rec's rows: eager, graph (and whether
    the graph's output equals eager's), rel_err at check_m."""
    for m in ms:
        if time.time() - rec.t0 > budget_s - 15:
            rec.note("budget: stopped before M=%d" % m)
            break
        row = {"m": m, "graph_ms": None, "eager_ms": None, "rel_err": None}
        rec.doc["rows"].append(row)
        try:
            x, ids, wts = make_inputs(torch, wl, m, "cuda")
            fwd = moe.bind(x, ids, wts)
            y = fwd().clone()
            torch.cuda.synchronize()
            if m in check_m:
                ref = reference(torch, wl, w, x, ids, wts)
                row["rel_err"] = float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))
            row["eager_ms"] = timer.eager(fwd)
            row["graph_ms"], g = timer.graph(fwd)
            g.replay()
            torch.cuda.synchronize()
            row["graph_matches_eager"] = bool(torch.equal(fwd.out, y))
            row["block_m"] = fwd.block
            flops = 2.0 * m * wl.TOPK * 3 * wl.K * wl.N
            row["tflops"] = round(flops / (row["graph_ms"] * 1e-3) / 1e12, 2)
            rec.log("M=%5d graph %.4f ms  eager %.4f ms  block_m %d  rel_err %s  graph==eager %s" % (
                m, row["graph_ms"], row["eager_ms"], fwd.block,
                "-" if row["rel_err"] is None else "%.2e" % row["rel_err"], row["graph_matches_eager"]))
            del g, fwd
        except Exception as ex:  # report and go on: one M's failure keeps the others
            row["error"] = "%s: %s" % (type(ex).__name__, str(ex)[:400])
            rec.log("M=%d FAILED: %s" % (m, row["error"]))
            torch.cuda.synchronize()
        rec.write()


def prepare_and_sweep(torch, rec, wl, make_moe, block_rule, budget_default):
    """A peer script's work after loading the peer: the weights, the
    peer's layer (make_moe(weights)), then the sweep over PEER_M within
    PEER_BUDGET_S (default budget_default seconds)."""
    t = time.time()
    w = make_weights(torch, wl, "cuda")
    moe = make_moe(w)
    torch.cuda.synchronize()
    rec.doc["software"]["moe_align_block_size"] = moe.align.kind
    rec.doc["block_size_m_rule"] = block_rule
    rec.log("device", rec.doc["device"], "| layer prepared in %.1fs | align: %s" % (time.time() - t, moe.align.kind))
    rec.write()
    sweep(torch, rec, Timer(torch), moe, wl, w, env_list("PEER_M", M_DEFAULT),
          float(os.environ.get("PEER_BUDGET_S", str(budget_default))))
    rec.write()
