"""Running `kimimoe check` and turning its verdict into a Python result."""
import json
import os
import shutil
import subprocess
import tempfile

from . import _safetensors


# DEFAULT_TIMEOUT_S bounds one `kimimoe check` run: a check at a real
# layer's shape takes seconds to a few minutes on two cores, so a hang shows
# as a CheckError instead of a CI job that never ends.
DEFAULT_TIMEOUT_S = 600


class CheckError(RuntimeError):
    """kimimoe could not check (a usage or input error: exit status 2), or
    could not be run at all."""


def _carried():
    """The command a wheel carries (python/make_wheel.py), or None."""
    for name in ("kimimoe", "kimimoe.exe"):
        p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def find_kimimoe(kimimoe=None):
    """The kimimoe command: the argument, $KIMIMOE, `kimimoe` on PATH, or
    the one an installed wheel carries."""
    exe = kimimoe or os.environ.get("KIMIMOE") or shutil.which("kimimoe") or _carried()
    if not exe:
        raise CheckError("kimimoe not found: pass kimimoe=PATH, set $KIMIMOE, put it on PATH (go install ./cmd/kimimoe), "
                         "or install the wheel python/make_wheel.py builds")
    return exe


def run_command(cmd, timeout, ok=(0,)):
    """Run a kimimoe command (cmd[1] names it); CheckError for an exit
    status not in ok, a run past timeout seconds, or one that cannot start."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise CheckError("kimimoe %s did not finish in %g s (timeout=...)" % (cmd[1], timeout)) from e
    except OSError as e:
        raise CheckError("running %s: %s" % (cmd[0], e)) from e
    if p.returncode not in ok:
        raise CheckError("kimimoe %s exited %d: %s" % (cmd[1], p.returncode, p.stderr.strip()))
    return p


def run_check(case_path, candidate_path, *, kimimoe=None, tensor="out", args=(), timeout=DEFAULT_TIMEOUT_S):
    """Run `kimimoe check --case CASE --candidate CAND --json -`.

    Returns (passed, report dict, text report). Raises CheckError for exit
    status 2 (the text says which input or flag is bad), a run past timeout
    seconds (None: no limit) or any other failure to run."""
    cmd = [find_kimimoe(kimimoe), "check", "--case", os.fsdecode(case_path), "--candidate", os.fsdecode(candidate_path),
           "--tensor", tensor, "--json", "-"] + list(args)
    p = run_command(cmd, timeout, ok=(0, 1))
    try:
        report = json.loads(p.stdout)
    except ValueError as e:
        raise CheckError("kimimoe check wrote no JSON report: %s\n%s" % (e, p.stderr)) from e
    return p.returncode == 0, report, p.stderr


def assert_close_file(candidate_path, case_path, **kw):
    """assert_moe_close for a candidate already saved as a safetensors file."""
    passed, report, text = run_check(case_path, candidate_path, **kw)
    if not passed:
        raise AssertionError("kimimoe check failed for %s against case %s\n%s" % (candidate_path, case_path, text))
    return report


def with_candidate_file(write, fn):
    """Call write(path) on a temporary file, then fn(path); remove it."""
    d = tempfile.mkdtemp(prefix="kimimoe-")
    path = os.path.join(d, "candidate.safetensors")
    try:
        write(path)
        return fn(path)
    finally:
        shutil.rmtree(d, ignore_errors=True)


__all__ = ["DEFAULT_TIMEOUT_S", "CheckError", "find_kimimoe", "run_command", "run_check", "assert_close_file", "with_candidate_file", "_safetensors"]
