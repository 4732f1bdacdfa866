"""The torch half of the helper: dump_case from torch tensors, a candidate
from a torch tensor, and the diagnosis of a layout mistake. Needs torch and
the kimimoe command ($KIMIMOE or PATH). Run:
python3 -m unittest discover python/tests"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import kimimoe  # noqa: E402
from kimimoe import _safetensors  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

EXE = os.environ.get("KIMIMOE") or shutil.which("kimimoe")


@unittest.skipUnless(torch is not None and EXE, "needs torch and the kimimoe command")
class TorchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kimimoe-test-")
        g = torch.Generator().manual_seed(5)
        E, N, K, M, topk = 4, 64, 128, 8, 2
        self.M, self.K = M, K
        u8 = lambda *s: torch.randint(0, 256, s, generator=g, dtype=torch.uint8)
        sc = lambda *s: torch.randint(120, 124, s, generator=g, dtype=torch.uint8)
        # A checkpoint's FC1 as SGLang holds it: [w1; w3] = [gate; up].
        self.t = dict(
            x=torch.randn(M, K, generator=g).to(torch.bfloat16),
            topk_ids=torch.stack([torch.randperm(E, generator=g)[:topk] for _ in range(M)]),
            topk_weights=torch.rand(M, topk, generator=g),
            w31=u8(E, 2 * N, K // 2), w31_scale=sc(E, 2 * N, K // 32),
            w2=u8(E, K, N // 2), w2_scale=sc(E, K, N // 32),
            w31_bias=torch.randn(E, 2 * N, generator=g), w2_bias=torch.randn(E, K, generator=g),
            activation="situ", situ_beta=4.0, situ_linear_beta=25.0)
        if torch.cuda.is_available():  # tensors where a serving stack has them
            self.t = {k: v.cuda() if torch.is_tensor(v) else v for k, v in self.t.items()}

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def oracle_out(self, case):
        """The oracle's output for a case, as a torch tensor (kimimoe run)."""
        out = self.path("oracle.safetensors")
        subprocess.run([EXE, "run", "--case", case, "--out", out], check=True, capture_output=True)
        ts, _ = _safetensors.read(out)
        dtype, shape, raw = ts["out"]
        return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)

    def test_dump_and_assert(self):
        case = self.path("case.safetensors")
        kimimoe.dump_case(case, fc1_layout="gate_up", **self.t)
        out = self.oracle_out(case)
        report = kimimoe.assert_moe_close(out, case)
        self.assertTrue(report["pass"])
        self.assertEqual(report["checked"]["biases"], "w31_bias, w2_bias")
        kimimoe.assert_moe_close(out.to(torch.bfloat16), case)  # a bf16 output passes too

    def test_layout_mistake_is_diagnosed(self):
        right, wrong = self.path("right.safetensors"), self.path("wrong.safetensors")
        kimimoe.dump_case(right, fc1_layout="gate_up", **self.t)
        kimimoe.dump_case(wrong, fc1_layout="up_gate", **self.t)  # the [gate; up] rows taken as [up; gate]
        out = self.oracle_out(right)
        with self.assertRaises(AssertionError) as cm:
            kimimoe.assert_moe_close(out, wrong)
        self.assertIn("most likely: gate_up_swapped", str(cm.exception))
        print(str(cm.exception))

    def test_activation_and_parameters_are_checked(self):
        """dump_case names a bad activation or parameter at once, from the
        activation table (python/kimimoe/_activations.py)."""
        t = {k: v for k, v in self.t.items() if k not in ("situ_beta", "situ_linear_beta")}
        with self.assertRaisesRegex(ValueError, "not a kind kimimoe has"):
            kimimoe.dump_case(self.path("a.safetensors"), **dict(t, activation="swish"))
        with self.assertRaisesRegex(TypeError, "swiglu_oai has no parameter 'situ_beta'"):
            kimimoe.dump_case(self.path("b.safetensors"), **dict(t, activation="swiglu_oai", situ_beta=4.0))
        with self.assertRaisesRegex(ValueError, "activation relu wants 64"):
            kimimoe.dump_case(self.path("c.safetensors"), **dict(t, activation="relu"))
        for p in ("a.safetensors", "b.safetensors", "c.safetensors"):
            self.assertFalse(os.path.exists(self.path(p)), "a refused case leaves no file")
        case = self.path("d.safetensors")
        kimimoe.dump_case(case, **dict(t, activation="GPToss_SwiGLU", swiglu_limit=5.0))
        _, md = _safetensors.read(case)
        self.assertEqual((md["activation"], md["swiglu_limit"]), ("swiglu_oai", "5.0"))


@unittest.skipUnless(torch is not None, "needs torch")
class NumpyDumpTest(unittest.TestCase):
    """dump_case's numpy writer (numpy arrays alone) writes the bytes its
    torch writer does, every layout conversion included (skipped without
    numpy); and it runs where torch cannot be imported."""

    def kw(self, layout, scales):
        g = torch.Generator().manual_seed(5)
        e, k, n, m = 2, 256, 64, 3
        r31, r2 = torch.randint(0, 256, (e, 2 * n, k // 32), generator=g, dtype=torch.uint8), \
            torch.randint(0, 256, (e, k, n // 32), generator=g, dtype=torch.uint8)
        if scales == "swizzled":  # any bytes: the writer only moves them
            r31 = torch.randint(0, 256, (e, 256 * 4), generator=g, dtype=torch.uint8)
            r2 = torch.randint(0, 256, (e, 256 * 4), generator=g, dtype=torch.uint8)
        return dict(x=torch.randn(m, k, generator=g), topk_ids=torch.tensor([[0, 1], [1, 0], [0, 1]], dtype=torch.int64),
                    topk_weights=torch.full((m, 2), 0.5, dtype=torch.float64), activation="swiglu_oai", swiglu_limit=[7.0, 6.5],
                    w31=torch.randint(0, 256, (e, 2 * n, k // 2), generator=g, dtype=torch.uint8), w31_scale=r31,
                    w2=torch.randint(0, 256, (e, k, n // 2), generator=g, dtype=torch.uint8), w2_scale=r2,
                    w31_bias=torch.randn(e, 2 * n, generator=g), w2_bias=torch.randn(e, k, generator=g),
                    fc1_layout=layout, scale_layout=scales, chain="bf16")

    def test_numpy_writer_matches_torch_writer(self):
        try:
            import numpy  # noqa: F401
        except ImportError:
            self.skipTest("no numpy")
        from kimimoe import _numpy
        with tempfile.TemporaryDirectory() as d:
            for layout in ("up_gate", "gate_up", "interleaved"):
                for scales in ("linear", "swizzled"):
                    kw = self.kw(layout, scales)
                    a, b = os.path.join(d, "t.safetensors"), os.path.join(d, "n.safetensors")
                    kimimoe.dump_case(a, **kw)
                    kimimoe.dump_case(b, **{key: v.numpy() if torch.is_tensor(v) else v for key, v in kw.items()})
                    with open(a, "rb") as fa, open(b, "rb") as fb:
                        self.assertEqual(fa.read(), fb.read(), "%s, %s scales" % (layout, scales))
            # Without torch: a child process that cannot import it.
            code = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, %r); import numpy as np, kimimoe; "
                    "kimimoe.dump_case(%r, x=np.ones((1, 64), np.float32), topk_ids=np.zeros((1, 1), np.int32), "
                    "topk_weights=np.ones((1, 1), np.float32), w31=np.zeros((1, 64, 32), np.uint8), "
                    "w31_scale=np.full((1, 64, 2), 127, np.uint8), w2=np.zeros((1, 64, 16), np.uint8), "
                    "w2_scale=np.full((1, 64, 1), 127, np.uint8), activation='situ')") % (
                os.path.join(os.path.dirname(__file__), ".."), os.path.join(d, "no_torch.safetensors"))
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            _, md = _safetensors.read(os.path.join(d, "no_torch.safetensors"))
            self.assertEqual(md["activation"], "situ")


if __name__ == "__main__":
    unittest.main()
