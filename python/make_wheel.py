#!/usr/bin/env python3
"""Build a platform wheel of the Python helper that carries the kimimoe
command, so `pip install kimimoe-*.whl` works on a machine without Go.

    python3 python/make_wheel.py [OUTDIR]      (default: dist/)

It builds the command for this machine (go build, CGO_ENABLED=0: the GPU
backend then reports no device, and the binary needs no libc of a given
version), puts it in the package as kimimoe/bin/kimimoe, and writes
OUTDIR/kimimoe-VERSION-py3-none-PLATFORM.whl with the standard library
alone (a wheel is a zip with its dist-info; no setuptools or wheel
package needed). GOOS and GOARCH pick another platform; the tag follows.
The helper finds the carried command when neither kimimoe=PATH nor
$KIMIMOE names one and none is on PATH.
"""
import base64
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TAGS = {("linux", "amd64"): "linux_x86_64", ("linux", "arm64"): "linux_aarch64",
        ("darwin", "arm64"): "macosx_11_0_arm64", ("darwin", "amd64"): "macosx_10_12_x86_64",
        ("windows", "amd64"): "win_amd64"}


def go_env(name):
    return subprocess.run(["go", "env", name], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()


def version():
    text = open(os.path.join(HERE, "pyproject.toml")).read()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        sys.exit("make_wheel.py: no version in python/pyproject.toml")
    return m.group(1)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def main(out_dir):
    goos, goarch = go_env("GOOS"), go_env("GOARCH")
    tag = TAGS.get((goos, goarch))
    if tag is None:
        sys.exit("make_wheel.py: no wheel platform tag for %s/%s" % (goos, goarch))
    exe = "kimimoe.exe" if goos == "windows" else "kimimoe"
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, exe)
        env = dict(os.environ, CGO_ENABLED="0")
        subprocess.run(["go", "build", "-trimpath", "-buildvcs=true", "-o", binary, "./cmd/kimimoe"],
                       cwd=ROOT, env=env, check=True)
        files = []
        pkg = os.path.join(HERE, "kimimoe")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                with open(os.path.join(pkg, name), "rb") as f:
                    files.append(("kimimoe/" + name, f.read(), 0o644))
        with open(binary, "rb") as f:
            files.append(("kimimoe/bin/" + exe, f.read(), 0o755))
    ver = version()
    dist = "kimimoe-%s.dist-info" % ver
    files.append((dist + "/METADATA", ("Metadata-Version: 2.1\nName: kimimoe\nVersion: %s\n"
                                       "Summary: Check a MoE kernel's output against kimimoe's exact oracle\n"
                                       "Requires-Python: >=3.9\n" % ver).encode(), 0o644))
    files.append((dist + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: kimimoe make_wheel.py\nRoot-Is-Purelib: false\n"
                                    "Tag: py3-none-%s\n" % tag).encode(), 0o644))
    record = "\n".join(record_line(n, d) for n, d, _ in files) + "\n%s/RECORD,,\n" % dist
    files.append((dist + "/RECORD", record.encode(), 0o644))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "kimimoe-%s-py3-none-%s.whl" % (ver, tag))
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))
    return path


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "dist"))
