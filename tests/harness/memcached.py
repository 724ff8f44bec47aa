"""memcached servers on loopback for the remote tier's tests and benchmark
(Debian's memcached 1.6), a minimal text-protocol client to look at and
damage values from outside, and the tier's key, computed from the
contract (docs/design.md 2.4) rather than from the daemon's sources."""

import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import unittest

MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Memcached:
    """One memcached on 127.0.0.1:`port`; start()/kill()/stop(), always
    reaped by cleanup()."""

    def __init__(self, port=None, memory_mb=64, max_item="4m"):
        self.port = port or free_port()
        self.memory_mb = memory_mb
        self.max_item = max_item
        self.proc = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        # A second start would orphan the first process (same port).
        assert self.proc is None or self.proc.poll() is not None, "already running"
        argv = [MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                "-m", str(self.memory_mb), "-I", self.max_item, "-t", "2"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("memcached on port %d exited with %d"
                                     % (self.port, self.proc.returncode))
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise AssertionError("memcached on port %d did not listen" % self.port)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def pause(self):
        """SIGSTOP: a node that accepts nothing and answers nothing."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.kill()

    # -- the text protocol

    def _call(self, request, until):
        with socket.create_connection(("127.0.0.1", self.port), 2) as s:
            s.sendall(request)
            data = b""
            while not any(data.endswith(u) for u in until):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            return data

    def get(self, key):
        data = self._call(b"get %s\r\n" % key.encode(), (b"END\r\n",))
        if not data.startswith(b"VALUE "):
            return None
        header, rest = data.split(b"\r\n", 1)
        length = int(header.split()[3])
        return rest[:length]

    def set(self, key, value):
        reply = self._call(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value),
                           (b"\r\n",))
        assert reply == b"STORED\r\n", reply

    def stats(self):
        data = self._call(b"stats\r\n", (b"END\r\n",))
        out = {}
        for line in data.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out


def fnv1a(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def remote_key(source, relpath, base):
    """The remote tier's key of the image at SOURCE/relpath (a whole file)
    at `base`: jfs1: and the FNV-1a of the key material (docs/design.md
    2.4): base, file size, mtime in ns, offset and length (0 for a whole
    file), relative path."""
    st = os.stat(os.path.join(source, relpath))
    material = struct.pack("<IQQQQ", base, st.st_size, st.st_mtime_ns, 0, 0) + \
        relpath.encode()
    return "jfs1:%016x" % fnv1a(material)


def require_memcached():
    if not os.access(MEMCACHED, os.X_OK):
        raise unittest.SkipTest("memcached not installed (scripts/setup.sh)")
