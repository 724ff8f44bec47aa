"""S3 on loopback for the s3:// SOURCE tests and benchmark: a real S3
server (moto, harness/s3_server.py) and, in front of it, an HTTP proxy of
ours that counts requests, can delay each one, and can fail the GETs of
chosen keys (moto injects no faults).

The server runs under a Python that has moto: $JOADERFS_MOTO_PYTHON, else
the test venv's (.venv-test, pinned in python/requirements-test.txt), else
the python3 on PATH; S3Server() raises unittest.SkipTest when none has it.
"""

import http.client
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def moto_python():
    """A Python that imports moto's server and boto3, or None."""
    candidates = [os.environ.get("JOADERFS_MOTO_PYTHON"),
                  os.path.join(REPO, ".venv-test", "bin", "python"),
                  shutil.which("python3"), sys.executable]
    for python in candidates:
        if not python or not os.path.exists(python):
            continue
        r = subprocess.run([python, "-c", "import moto.server, boto3, flask"],
                           capture_output=True)
        if r.returncode == 0:
            return python
    return None


class S3Server:
    """moto on 127.0.0.1 with signatures checked; .endpoint, .access_key,
    .secret_key. Call stop() (tests: addCleanup / tearDownClass)."""

    def __init__(self):
        python = moto_python()
        if python is None:
            raise unittest.SkipTest(
                "no Python with moto[server] (scripts/setup.sh installs it in .venv-test; "
                "or set JOADERFS_MOTO_PYTHON)")
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "s3_server.py")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise AssertionError("the moto server did not start (status %s)"
                                 % self.proc.returncode)
        hello = json.loads(line)
        self.port = hello["port"]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.access_key = hello["access_key"]
        self.secret_key = hello["secret_key"]

    def command(self, **cmd):
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise AssertionError("S3 %s: %s" % (cmd, answer["error"]))
        return answer

    def bucket(self, name):
        self.command(op="bucket", bucket=name)

    def put(self, bucket, key, path):
        self.command(op="put", bucket=bucket, key=key, path=path)

    def put_bytes(self, bucket, key, data):
        self.command(op="put_bytes", bucket=bucket, key=key, hex=data.hex())

    def upload_tree(self, bucket, prefix, root):
        """Every file under `root` as PREFIX/<its relative path>, in one
        command (one client, no round trip per file)."""
        self.command(op="put_tree", bucket=bucket, prefix=prefix, root=os.path.abspath(root))

    def etag(self, bucket, key):
        return self.command(op="etag", bucket=bucket, key=key)["etag"]

    def env(self):
        """The environment variables that give a daemon its credentials."""
        return {"AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class Proxy:
    """An HTTP proxy on 127.0.0.1 in front of `upstream` (host, port).

    .gets[key]: GETs of each object key (listings are not counted);
    .ranges[key]: the Range header of each (None for a whole object);
    .max_concurrent_gets: the most GETs at once, each counted from its
    arrival until its answer came from upstream (before it is sent on, so
    that a client's next GET never overlaps its last in this count);
    .requests: every request; fail(key, times) answers the next `times`
    GETs of `key` with 503 (times=None: every one); delay: seconds added
    before each request is forwarded."""

    def __init__(self, upstream_port, delay=0.0):
        self.upstream_port = upstream_port
        self.delay = delay
        self.lock = threading.Lock()
        self.gets = {}
        self.ranges = {}
        self.concurrent_gets = 0
        self.max_concurrent_gets = 0
        self.requests = 0
        self.failures = {}  # key -> remaining failures, None: always
        self.failed = {}    # key -> 503s answered
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = urllib.parse.urlsplit(self.path)
                parts = path.path.lstrip("/").split("/", 1)
                key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
                is_get = self.command == "GET" and key and not path.query
                fail = False
                with proxy.lock:
                    proxy.requests += 1
                    if is_get:
                        proxy.gets[key] = proxy.gets.get(key, 0) + 1
                        proxy.ranges.setdefault(key, []).append(self.headers.get("Range"))
                        proxy.concurrent_gets += 1
                        proxy.max_concurrent_gets = max(proxy.max_concurrent_gets,
                                                        proxy.concurrent_gets)
                        if key in proxy.failures:
                            left = proxy.failures[key]
                            fail = True
                            if left is not None:
                                if left <= 1:
                                    del proxy.failures[key]
                                else:
                                    proxy.failures[key] = left - 1
                            proxy.failed[key] = proxy.failed.get(key, 0) + 1
                if proxy.delay:
                    time.sleep(proxy.delay)

                def answered():
                    if is_get:
                        with proxy.lock:
                            proxy.concurrent_gets -= 1
                if fail:
                    answered()
                    payload = b"<Error><Code>ServiceUnavailable</Code></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port,
                                                  timeout=60)
                in_progress = True
                try:
                    # The Host header as signed (the proxy's address) goes
                    # through unchanged.
                    conn.putrequest(self.command, self.path, skip_host=True,
                                    skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("connection", "keep-alive"):
                            conn.putheader(name, value)
                    conn.endheaders(body)
                    r = conn.getresponse()
                    data = r.read()
                    answered()
                    in_progress = False
                    self.send_response(r.status)
                    for name, value in r.getheaders():
                        if name.lower() not in ("connection", "keep-alive",
                                                "transfer-encoding", "content-length",
                                                "server", "date"):
                            self.send_header(name, value)
                    if self.command == "HEAD":
                        self.send_header("Content-Length",
                                         r.getheader("Content-Length") or "0")
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    if in_progress:
                        answered()
                    conn.close()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        self.server = _ThreadingServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, key, times=None):
        with self.lock:
            self.failures[key] = times

    def heal(self, key):
        with self.lock:
            self.failures.pop(key, None)

    def reset_counts(self):
        with self.lock:
            self.gets.clear()
            self.ranges.clear()
            self.failed.clear()
            self.max_concurrent_gets = 0
            self.requests = 0

    def total_gets(self):
        with self.lock:
            return sum(self.gets.values())

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
