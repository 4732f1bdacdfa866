"""The standard-library half of the helper, against the kimimoe command
($KIMIMOE, or kimimoe on PATH). Run: python3 -m unittest discover python/tests"""
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import kimimoe  # noqa: E402
from kimimoe import _safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GOLDEN = os.path.join(ROOT, "testdata", "golden", "situ_mxfp8_rceil.safetensors")


class SafetensorsTest(unittest.TestCase):
    def test_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.safetensors")
            _safetensors.write(p, {"b": _safetensors.f32((2,), [1.5, -2.0]), "a": ("U8", (3,), b"\x01\x02\x03")}, {"k": "v"})
            ts, md = _safetensors.read(p)
            self.assertEqual(md, {"k": "v"})
            self.assertEqual(ts["a"], ("U8", (3,), b"\x01\x02\x03"))
            self.assertEqual(struct.unpack("<2f", ts["b"][2]), (1.5, -2.0))

    def test_size_mismatch_refused(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(ValueError):
                _safetensors.write(os.path.join(d, "t.safetensors"), {"a": ("F32", (2,), b"\x00" * 4)})
            self.assertEqual(os.listdir(d), [])


@unittest.skipUnless(os.environ.get("KIMIMOE") or __import__("shutil").which("kimimoe"), "no kimimoe command")
class AssertTest(unittest.TestCase):
    def golden_out(self):
        ts, _ = _safetensors.read(GOLDEN)
        dtype, shape, raw = ts["out"]
        return shape, list(struct.unpack("<%df" % (len(raw) // 4), raw))

    def test_correct_candidate_passes(self):
        report = kimimoe.assert_moe_close(GOLDEN, GOLDEN)
        self.assertTrue(report["pass"])
        self.assertEqual(report["checked"]["chain"], "mxfp8")

    def test_wrong_candidate_raises_with_the_diagnosis(self):
        shape, v = self.golden_out()
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "cand.safetensors")
            _safetensors.write(p, {"out": _safetensors.f32(shape, [x * 1.05 for x in v])})
            with self.assertRaises(AssertionError) as cm:
                kimimoe.assert_moe_close(p, GOLDEN)
            self.assertIn("FAIL: NRMSE", str(cm.exception))
            self.assertIn("hypotheses (best first)", str(cm.exception))

    def test_bad_shape_is_a_check_error(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "cand.safetensors")
            _safetensors.write(p, {"out": _safetensors.f32((1, 2), [0.0, 0.0])})
            with self.assertRaises(kimimoe.CheckError) as cm:
                kimimoe.assert_moe_close(p, GOLDEN)
            self.assertIn("shape", str(cm.exception))


if __name__ == "__main__":
    unittest.main()


class TimeoutTest(unittest.TestCase):
    """A kimimoe that never answers becomes a CheckError, not a hung test;
    one that prints bytes that are not UTF-8 is still read."""

    def fake(self, d, body):
        p = os.path.join(d, "kimimoe")
        with open(p, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(p, 0o755)
        return p

    def test_a_hang_times_out(self):
        with tempfile.TemporaryDirectory() as d:
            km = self.fake(d, "sleep 30")
            with self.assertRaises(kimimoe.CheckError) as cm:
                kimimoe.assert_moe_close(GOLDEN, GOLDEN, kimimoe=km, timeout=0.5)
            self.assertIn("did not finish", str(cm.exception))

    def test_a_default_timeout(self):
        self.assertGreater(kimimoe.DEFAULT_TIMEOUT_S, 0)

    def test_non_utf8_output_is_read(self):
        with tempfile.TemporaryDirectory() as d:
            km = self.fake(d, "printf '\\377\\376 bad' >&2; exit 2")
            with self.assertRaises(kimimoe.CheckError) as cm:
                kimimoe.assert_moe_close(GOLDEN, GOLDEN, kimimoe=km)
            self.assertIn("bad", str(cm.exception))


class StrictReadTest(unittest.TestCase):
    """read refuses what the Go reader refuses (round 3's R3-10): negative
    offsets, bad shapes, a header length past the file."""

    def raw(self, d, header, body=b""):
        import json as _json
        h = _json.dumps(header).encode()
        p = os.path.join(d, "t.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + body)
        return p

    def test_bad_files(self):
        with tempfile.TemporaryDirectory() as d:
            for header, body in [
                ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [-2, 0]}}, b"xx"),
                ({"a": {"dtype": "U8", "shape": [-2], "data_offsets": [0, 2]}}, b"xx"),
                ({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 2]}}, b"xx"),
                ({"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 2]}}, b"xx"),
                ({"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}, b"xx"),
                ({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"xx"),
            ]:
                with self.assertRaises(ValueError, msg=repr(header)):
                    _safetensors.read(self.raw(d, header, body))
            p = os.path.join(d, "long.safetensors")
            with open(p, "wb") as f:
                f.write(struct.pack("<Q", 1 << 40) + b"{}")
            with self.assertRaises(ValueError):
                _safetensors.read(p)


@unittest.skipUnless(os.environ.get("KIMIMOE") or __import__("shutil").which("kimimoe"), "no kimimoe command")
class NumpyTest(unittest.TestCase):
    """numpy arrays are candidates, and reference gives the oracle's output
    as an array (skipped where numpy is absent)."""

    def setUp(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("no numpy")
        self.np = numpy

    def test_reference_and_an_array_candidate(self):
        ref = kimimoe.reference(GOLDEN, framework="numpy")
        ts, _ = _safetensors.read(GOLDEN)
        _, shape, raw = ts["out"]
        self.assertEqual(ref.shape, tuple(shape))
        self.assertEqual(ref.tobytes(), raw)
        self.assertTrue(kimimoe.assert_moe_close(ref, GOLDEN)["pass"])
        with self.assertRaises(AssertionError):
            kimimoe.assert_moe_close(ref * 1.05, GOLDEN)

    def test_dump_case_without_torch_says_why(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed")
        except ImportError:
            pass
        with self.assertRaises(ImportError) as cm:
            kimimoe.dump_case("/nonexistent/c.safetensors", x=self.np.zeros((1, 32), dtype="float32"))
        self.assertIn("needs torch", str(cm.exception))
        self.assertIn("x", str(cm.exception))
