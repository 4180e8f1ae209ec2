"""The bootstrap: a small program run as `python3 -c <code>` that unpacks the agent from stdin.

stdin carries, in one stream (no extra round trip):
    b"GPUPOOL1 <zip length> <zip sha256>\\n" + zip bytes + JSON request (to EOF)
or, for a long-running session (gpupoolctl.remote.session), a header with a fourth word:
    b"GPUPOOL1 <zip length> <zip sha256> serve\\n" + zip bytes, then request lines
(the agent's serve mode, gpupoolctl.agent.main.serve: it says when it is ready, answers each
line, and ends at EOF).

The bootstrap checks the hash and unpacks the agent once per hash into a per-user cache
(`$XDG_CACHE_HOME/gpupoolctl/agent-<sha256>/` or under `~/.cache`, else
`$TMPDIR/gpupoolctl-<uid>`, else a private temp dir removed on exit), puts that folder first on
sys.path and hands the request to gpupoolctl.agent.main. An unpacked folder rather than the
zip itself, because Python then keeps compiled bytecode beside the sources and later runs skip
compiling (a quarter of the agent's start-up); it does so even under PYTHONDONTWRITEBYTECODE,
as the folder is the agent's own. The folder appears by one atomic rename with a
`.complete` marker inside, so a concurrent or interrupted run never sees half of it; versions
unused for a week (each run touches its folder) are pruned. Its own failures go to stderr
prefixed "gpupoolctl-bootstrap:".
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: importing payload would load zipfile and hashlib
    from gpupoolctl.remote.payload import Payload

MAGIC = "GPUPOOL1"
MIN_PYTHON = (3, 8)
ERROR_PREFIX = "gpupoolctl-bootstrap:"

# Kept free of single quotes so shlex.quote wraps it in one pair of quotes, and free of
# f-strings so an old interpreter reaches the version check and says why it stops.
# `python -c` puts the working folder ("") first on sys.path; the bootstrap drops it before
# any import, so a hashlib.py or json.py in the folder the agent starts in never runs.
BOOTSTRAP = """\
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
def _fail(m):
    sys.stderr.write("gpupoolctl-bootstrap: %s\\n" % m)
    sys.exit(3)
if sys.version_info < (3, 8):
    _fail("python %s is too old, the agent needs 3.8 or newer" % sys.version.split()[0])
import hashlib, os, stat
i = sys.stdin.buffer
h = i.readline().split()
if len(h) not in (3, 4) or h[0] != b"GPUPOOL1" or h[3:] not in ([], [b"serve"]):
    _fail("bad header on stdin")
n = int(h[1])
d = h[2].decode("ascii")
z = i.read(n)
if len(z) != n:
    _fail("payload truncated: %d of %d bytes" % (len(z), n))
if hashlib.sha256(z).hexdigest() != d:
    _fail("payload hash mismatch")
sv = len(h) == 4
q = None if sv else i.read().decode("utf-8")
def _store(b):
    os.makedirs(b, 0o700, exist_ok=True)
    s = os.lstat(b)
    if not stat.S_ISDIR(s.st_mode) or s.st_uid != os.getuid() or s.st_mode & 0o022:
        raise OSError("unsafe cache folder " + b)
    p = os.path.join(b, "agent-" + d)
    m = os.path.join(p, ".complete")
    if os.path.isfile(m):
        try:
            os.utime(p)
        except OSError:
            pass
        return p
    import io, shutil, tempfile, zipfile
    t = tempfile.mkdtemp(prefix=".agent-", dir=b)
    try:
        zipfile.ZipFile(io.BytesIO(z)).extractall(t)
        open(os.path.join(t, ".complete"), "w").close()
        os.rename(t, p)
    except OSError:
        if os.path.isfile(m):
            shutil.rmtree(t, True)
            return p
        x = tempfile.mkdtemp(prefix=".stale-", dir=b)
        os.rename(p, os.path.join(x, "old"))
        shutil.rmtree(x, True)
        os.rename(t, p)
    _prune(b, p)
    return p
def _prune(b, keep):
    import shutil, time
    for e in os.listdir(b):
        f = os.path.join(b, e)
        try:
            if e.startswith("agent-") and f != keep and os.lstat(f).st_mtime < time.time() - 604800:
                shutil.rmtree(f) if os.path.isdir(f) else os.unlink(f)
        except OSError:
            pass
def _bases():
    c = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    yield os.path.join(c, "gpupoolctl")
    import tempfile
    yield os.path.join(tempfile.gettempdir(), "gpupoolctl-%d" % os.getuid())
def _path():
    for b in _bases():
        try:
            return _store(b)
        except OSError:
            pass
    import atexit, shutil, tempfile
    b = tempfile.mkdtemp(prefix="gpupoolctl-")
    atexit.register(shutil.rmtree, b, True)
    os.environ["GPUPOOL_AGENT_EPHEMERAL"] = "1"
    return _store(b)
sys.path.insert(0, _path())
sys.dont_write_bytecode = False
from gpupoolctl.agent.main import main, serve_stdio
sys.exit(serve_stdio(i) if sv else main(q))
"""


def interpreter_argv(python: str) -> list[str]:
    """argv for running the bootstrap without a shell (the local transport)."""
    return [python, "-c", BOOTSTRAP]


def remote_command(python: str) -> str:
    """The one shell command line sent over SSH. `exec` spares a shell process; every word
    is quoted, so an inventory's python value is data, never code."""
    return f"exec {shlex.quote(python)} -c {shlex.quote(BOOTSTRAP)}"


def encode_stdin(payload: Payload, request: dict[str, Any]) -> bytes:
    header = f"{MAGIC} {payload.size} {payload.sha256}\n".encode("ascii")
    body = json.dumps(request, separators=(",", ":")).encode("utf-8")
    return header + payload.data + body


def encode_serve_header(payload: Payload) -> bytes:
    """What starts a serve-mode agent: the header with `serve`, then the zip. Request lines
    follow only after the agent's ready line (none may sit in the bootstrap's read buffer)."""
    header = f"{MAGIC} {payload.size} {payload.sha256} serve\n".encode("ascii")
    return header + payload.data


def missing_interpreter_message(python: str) -> str:
    if python == "python3":
        return (
            "no python3 on the node (not found in the login PATH); set the `python` host var "
            "to its interpreter, e.g. python: /usr/bin/python3"
        )
    return (
        f"no python interpreter at {python!r} on the node; set the `python` host var "
        "to its interpreter"
    )
