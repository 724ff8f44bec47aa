"""memcached servers for the remote tier's tests and benchmark (Debian's
memcached 1.6), on loopback or each in a network namespace of its own, a
minimal text-protocol client to look at and damage values from outside,
and the tier's keys and leases under a cluster key, computed from the
contract (docs/design.md 3.2) rather than from the daemon's sources."""

import hashlib
import hmac
import ipaddress
import itertools
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import time
import unittest

MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
IP = shutil.which("ip") or "/usr/sbin/ip"
PORT = 11211  # inside a namespace of its own, no other server can hold it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ip(*args, check=True):
    return subprocess.run([IP] + list(args), check=check, capture_output=True, text=True)


_names = itertools.count()


def netns_available():
    """Whether this process may make network namespaces and veth pairs
    (root, iproute2, a kernel that allows it): tried once, undone."""
    if os.geteuid() != 0 or not os.access(IP, os.X_OK):
        return False
    ns = Netns()
    try:
        ns.create()
        return True
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        ns.delete()


class Netns:
    """A network namespace joined to this one by a veth pair: HOST_IF here
    with .1 of a random /30 of 10.232.0.0/16, the peer inside with .2, so
    that a node's server is reached over a link that can go down."""

    def __init__(self):
        n = next(_names)
        self.name = "jfs-%d-%d" % (os.getpid(), n)
        self.host_if = "jfh%d_%d" % (os.getpid() % 100000, n)  # at most 15 characters
        self.peer_if = "jfn%d_%d" % (os.getpid() % 100000, n)
        self.created = False
        taken = _ip("-o", "-4", "addr", "show").stdout if os.access(IP, os.X_OK) else ""
        while True:
            net = ipaddress.ip_network("10.232.%d.%d/30" % (random.randrange(256),
                                                              4 * random.randrange(64)))
            hosts = list(net.hosts())
            if str(hosts[0]) not in taken and str(hosts[1]) not in taken:
                break
        self.host_ip, self.ip = str(hosts[0]), str(hosts[1])

    def create(self):
        _ip("netns", "add", self.name)
        self.created = True
        peer = self.peer_if
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", self.name)
        _ip("addr", "add", self.host_ip + "/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        for args in (("addr", "add", self.ip + "/30", "dev", peer),
                     ("link", "set", peer, "up"), ("link", "set", "lo", "up")):
            _ip("-n", self.name, *args)

    def set_link(self, up):
        """The namespace's end of the pair goes down (or up): this end
        loses its carrier and keeps its route, so packets to the node are
        lost, as when a node's cable is pulled (not sent elsewhere by the
        default route)."""
        _ip("-n", self.name, "link", "set", self.peer_if, "up" if up else "down")

    def delete(self):
        """Removes the namespace, and with it both ends of the pair."""
        if self.created:
            _ip("netns", "del", self.name, check=False)
            self.created = False
        _ip("link", "del", self.host_if, check=False)


class Memcached:
    """One memcached on 127.0.0.1:`port`, or with `netns` on port 11211 of
    a network namespace of its own reached over a veth pair (Netns; the
    caller checks netns_available()); start()/kill()/pause(), link_down()/
    link_up(), always reaped by cleanup(), which removes the namespace."""

    def __init__(self, port=None, memory_mb=64, max_item="4m", netns=False, extra_args=()):
        self.extra_args = list(extra_args)  # TLS, say
        self.ns = Netns() if netns else None
        self.host = self.ns.ip if netns else "127.0.0.1"
        self.port = PORT if netns else port or free_port()
        self.memory_mb = memory_mb
        self.max_item = max_item
        self.proc = None

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def attach(self):
        """Makes the node's namespace (with `netns`), so that its address
        answers (connection refused) before the server starts."""
        if self.ns and not self.ns.created:
            self.ns.create()
        return self

    def start(self):
        # A second start would orphan the first process (same port).
        assert self.proc is None or self.proc.poll() is not None, "already running"
        argv = [MEMCACHED, "-l", self.host, "-p", str(self.port), "-U", "0",
                "-m", str(self.memory_mb), "-I", self.max_item, "-t", "2"] + self.extra_args
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        if self.ns:
            self.attach()
            argv = [IP, "netns", "exec", self.ns.name] + argv  # ip execs memcached
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("memcached at %s exited with %d"
                                     % (self.address, self.proc.returncode))
            try:
                with socket.create_connection((self.host, self.port), 0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise AssertionError("memcached at %s did not listen" % self.address)

    def link_down(self):
        """The node's link goes down: its server runs on, unreachable."""
        self.ns.set_link(False)

    def link_up(self):
        self.ns.set_link(True)

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
        if self.ns:
            self.ns.delete()

    # -- the text protocol

    def _call(self, request, until):
        with socket.create_connection((self.host, self.port), 2) as s:
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

    def set(self, key, value, ttl=0):
        reply = self._call(b"set %s 0 %d %d\r\n%s\r\n" % (key.encode(), ttl, len(value), value),
                           (b"\r\n",))
        assert reply == b"STORED\r\n", reply

    def delete(self, key):
        reply = self._call(b"delete %s\r\n" % key.encode(), (b"\r\n",))
        assert reply in (b"DELETED\r\n", b"NOT_FOUND\r\n"), reply

    def stats(self):
        data = self._call(b"stats\r\n", (b"END\r\n",))
        out = {}
        for line in data.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out


def write_cluster_key(path, hex_key=None):
    """A cluster key file as an admin makes one (64 hex digits, mode 600);
    returns its hex."""
    hex_key = hex_key or os.urandom(32).hex()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(hex_key + "\n")
    return hex_key


def _derived(hex_key, label):
    return hmac.new(bytes.fromhex(hex_key), label, hashlib.sha256).digest()


def key_material(source, relpath, base):
    """What a value of the image at SOURCE/relpath (a whole file) at `base`
    is sealed for (docs/design.md 3.2): base, file size, mtime in ns, offset
    and length (0 for a whole file), relative path."""
    st = os.stat(os.path.join(source, relpath))
    return struct.pack("<IQQQQ", base, st.st_size, st.st_mtime_ns, 0, 0) + relpath.encode()


def remote_key(source, relpath, base, hex_key):
    """The memcached key of that image's value under the cluster key:
    jfs2: and 32 hex digits of the HMAC of its key material under the key's
    name key."""
    mac = hmac.new(_derived(hex_key, b"joaderfs name key"), key_material(source, relpath, base),
                   hashlib.sha256).hexdigest()
    return "jfs2:" + mac[:32]


def remote_lease(source, relpath, base, hex_key):
    """The key of the lease on that value's decode (jfs2l: and the same
    digits)."""
    return "jfs2l:" + remote_key(source, relpath, base, hex_key)[len("jfs2:"):]


def lease_value(lease_name, hex_key, expires_in=2.0):
    """An authentic lease, as a daemon of the cluster takes one: its expiry
    (Unix ms) and the HMAC of name and expiry under the lease key."""
    expiry = struct.pack("<Q", int((time.time() + expires_in) * 1000))
    mac = hmac.new(_derived(hex_key, b"joaderfs lease key"), lease_name.encode() + expiry,
                   hashlib.sha256).digest()
    return expiry + mac[:16]


def make_photos(root, n, seed=0, quality=90):
    """n 320 x 240 JPEGs in 4 classes: a decode at base 128 takes a few ms,
    long enough for two daemons asking at once to collide. Returns root and
    its ImageFolder order."""
    import numpy as np
    from harness.datasets import _image, imagefolder_order, small_layout
    rng = np.random.default_rng(seed)
    for cls, names in small_layout(n, 4).items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            _image(rng, 320, 240).save(os.path.join(root, cls, name), "JPEG", quality=quality)
    return root, imagefolder_order(root)


# remote_timeout= of the cluster tests' daemons where a failing server is
# not the subject: on a loaded 2-core machine a call was once descheduled
# past the 100 ms default, its server passed by and one value never
# published. Tests of failing servers keep the default, which is what their
# time bounds are about.
CALM_REMOTE_TIMEOUT = "2000"


def wait_published(m, count, timeout=30):
    """Waits until mount `m` has published `count` values, or dropped them
    (`remote_publish_drops`: over its limits); returns its stats, or raises
    AssertionError, at once where a server call failed (`remote_errors`:
    that value is not in the tier)."""
    deadline = time.monotonic() + timeout
    while True:
        st = m.stats()
        if st["remote_published"] + st["remote_publish_drops"] >= count:
            return st
        if st["remote_errors"] or time.monotonic() > deadline:
            raise AssertionError("published %d of %d; %d server calls failed" %
                                 (st["remote_published"], count, st["remote_errors"]))
        time.sleep(0.05)


def require_memcached():
    if not os.access(MEMCACHED, os.X_OK):
        raise unittest.SkipTest("memcached not installed (scripts/setup.sh)")


class HostileMemcached:
    """A 'memcached' of our own on loopback that lies, as a local user who
    binds the port while the real server is down could: `mode` is
      wrong:   every request line gets END (the text protocol's, a reply of
               the wrong kind to mg and ms);
      garbage: every request line gets 512 random bytes;
      huge:    every request gets a value declared 3 GB, then endless bytes;
      silent:  connections are accepted and never answered.
    Serves until cleanup(); `connections` counts who came."""

    def __init__(self, mode):
        import socketserver
        import threading
        self.mode = mode
        self.connections = 0
        self.stopping = threading.Event()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                outer.connections += 1
                conn = self.request
                conn.settimeout(0.2)
                while not outer.stopping.is_set():
                    try:
                        data = conn.recv(65536)
                    except socket.timeout:
                        continue
                    except OSError:
                        return
                    if not data:
                        return
                    try:
                        outer._answer(conn, data)
                    except OSError:
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.address = "127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _answer(self, conn, data):
        lines = data.count(b"\n") or 1
        if self.mode == "wrong":
            conn.sendall(b"END\r\n" * lines)
        elif self.mode == "garbage":
            conn.sendall(os.urandom(512 * lines))
        elif self.mode == "huge":
            conn.sendall(b"VA 3000000000 \r\n")
            chunk = b"x" * 65536
            while not self.stopping.is_set():
                conn.sendall(chunk)  # until the client hangs up
        # silent: nothing

    def cleanup(self):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
