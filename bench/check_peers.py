#!/usr/bin/env python3
"""Real clients for kimimoe check: the production W4A16 MoE kernels on kimimoe case files.

Makes four small layers' cases (BF16 x, the marlin chain: the unfused
W4A16 flow's rounding), runs each peer on them and writes its output
beside them:
  kimi_m1, kimi_m128, kimi_m1024   SiTU(4, 25), FC1 rows [gate; up] as the
                                   Kimi checkpoint holds them, 8 experts,
                                   top-4, K = N = 256, at M = 1, 128, 1024;
  oai_m32                          GPT-OSS's clamped SwiGLU, interleaved FC1
                                   rows, both biases, at M = 32.
The peers: Marlin (bench/peer_marlin.py; MARLIN_OPS or vLLM), Humming W4A16
and W4A8 (bench/peer_humming.py; HUMMING_SRC or humming); a peer that
cannot be loaded is skipped with a note. Files, in OUTDIR:
  CASE.safetensors                 the case (kimimoe.dump_case)
  CASE.PEER.out.safetensors        the peer's BF16 output
and two runs with a mistake a user can make in the peer's API, on kimi_m128:
  kimi_m128.marlin-scales-unpermuted.out.safetensors
                                   Marlin given the E8M0 scales in the
                                   checkpoint's order, not permuted as it wants;
  kimi_m128.humming-w4a16-nibbles-swapped.out.safetensors
                                   Humming given the codes with the two E2M1
                                   values of each byte swapped.
With KIMIMOE (the command) set, each output is checked on the marlin and
the bf16 chains and the verdicts printed. testdata/peers/README.md says how the committed files were made.

CHECK_PEERS (default marlin,humming) picks the peers.

usage: [MARLIN_OPS=LIB[:LIB]] [HUMMING_SRC=DIR] [KIMIMOE=kimimoe] [CHECK_PEERS=marlin] python3 bench/check_peers.py OUTDIR
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import peerlib  # noqa: E402

E, K, N, TOPK = 8, 256, 256, 4
SEED = 3063
CASES = [("kimi_m1", False, 1), ("kimi_m128", False, 128), ("kimi_m1024", False, 1024), ("oai_m32", True, 32)]


class SmallWorkload(peerlib.Workload):
    def __init__(self, oai):
        self.shape, self.E, self.K, self.N, self.TOPK = "check", E, K, N, TOPK
        self.oai = self.bias = oai


def main(out_dir):
    import torch
    import kimimoe
    from kimimoe._torch import write_candidate
    import peer_humming
    import peer_marlin
    os.makedirs(out_dir, exist_ok=True)
    dev = "cuda"
    rec = peerlib.Record("check", "", SmallWorkload(False), os.path.join(out_dir, "check_peers.json"))
    want = set((os.environ.get("CHECK_PEERS") or "marlin,humming").split(","))
    peers = {}
    try:
        if "marlin" not in want:
            raise SystemExit("not in CHECK_PEERS")
        peer_marlin.load_ops(torch, rec)
        peers["marlin"] = lambda wl, w: peer_marlin.MarlinMoE(torch, wl, w)
    except SystemExit as ex:
        rec.note("Marlin skipped: %s" % ex)
    try:
        if "humming" not in want:
            raise SystemExit("not in CHECK_PEERS")
        humming = peer_humming.import_humming(rec)
        peers["humming-w4a16"] = lambda wl, w: peer_humming.HummingMoE(torch, wl, w, humming, False, rec)
        peers["humming-w4a8"] = lambda wl, w: peer_humming.HummingMoE(torch, wl, w, humming, True, rec)
    except SystemExit as ex:
        rec.note("Humming skipped: %s" % ex)

    outputs = []  # (case file, candidate file, expected verdict)
    for name, oai, m in CASES:
        wl = SmallWorkload(oai)
        w = peerlib.make_weights(torch, wl, dev, seed=SEED + int(oai))
        x, ids, wts = peerlib.make_inputs(torch, wl, m, dev, seed=SEED)
        case = os.path.join(out_dir, name + ".safetensors")
        params = dict(swiglu_alpha=peerlib.SWIGLU_ALPHA, swiglu_beta=1.0, swiglu_limit=peerlib.SWIGLU_LIMIT) if oai \
            else dict(situ_beta=peerlib.SITU_BETA, situ_linear_beta=peerlib.SITU_LINEAR_BETA)
        kimimoe.dump_case(case, x=x, topk_ids=ids, topk_weights=wts, w31=w["w13"], w31_scale=w["w13_scale"],
                          w2=w["w2"], w2_scale=w["w2_scale"], w31_bias=w["b13"], w2_bias=w["b2"],
                          activation="swiglu_oai" if oai else "situ", chain="marlin",
                          fc1_layout="interleaved" if oai else "gate_up", **params)
        for peer, make in peers.items():
            try:
                y = make(wl, w).bind(x, ids, wts)().clone()
                torch.cuda.synchronize()
            except Exception as ex:
                rec.note("%s on %s failed: %s: %s" % (peer, name, type(ex).__name__, str(ex)[:300]))
                continue
            cand = os.path.join(out_dir, "%s.%s.out.safetensors" % (name, peer))
            write_candidate(cand, y)
            outputs.append((case, cand, "lossy" if peer.endswith("w4a8") else "pass"))
        if name == "kimi_m128":
            for peer, mistake in (("marlin", "scales-unpermuted"), ("humming-w4a16", "nibbles-swapped")):
                if peer not in peers:
                    continue
                try:
                    if mistake == "scales-unpermuted":
                        moe = peer_marlin.MarlinMoE(torch, wl, w)
                        moe.s1 = w["w13_scale"].transpose(1, 2).contiguous().view(torch.float8_e8m0fnu)
                        moe.s2 = w["w2_scale"].transpose(1, 2).contiguous().view(torch.float8_e8m0fnu)
                    else:
                        ww = dict(w, w13=(w["w13"] << 4) | (w["w13"] >> 4), w2=(w["w2"] << 4) | (w["w2"] >> 4))
                        moe = peers[peer](wl, ww)
                    y = moe.bind(x, ids, wts)().clone()
                    torch.cuda.synchronize()
                except Exception as ex:
                    rec.note("%s with %s failed: %s: %s" % (peer, mistake, type(ex).__name__, str(ex)[:300]))
                    continue
                cand = os.path.join(out_dir, "%s.%s-%s.out.safetensors" % (name, peer, mistake))
                write_candidate(cand, y)
                outputs.append((case, cand, "fail"))
    km = os.environ.get("KIMIMOE")
    for case, cand, want in outputs:
        rec.log("%-20s %-56s want %s" % (os.path.basename(case), os.path.basename(cand), want))
        for chain in ("marlin", "bf16") if km else ():
            r = subprocess.run([km, "check", "--case", case, "--candidate", cand, "--chain", chain],
                               capture_output=True, text=True, errors="replace")
            head = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS", "FAIL", "most likely", "no known", "observed", "cosine"))]
            rec.log("    %-6s exit %d | %s" % (chain, r.returncode, " | ".join(head)[:400]))
    rec.write()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
