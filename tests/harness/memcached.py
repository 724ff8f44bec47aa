"""memcached servers for the remote tier's tests and benchmark (Debian's
memcached 1.6), on loopback or each in a network namespace of its own, a
minimal text-protocol client to look at and damage values from outside,
and the tier's key, computed from the contract (docs/design.md 2.4) rather
than from the daemon's sources."""

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

    def __init__(self, port=None, memory_mb=64, max_item="4m", netns=False):
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
                "-m", str(self.memory_mb), "-I", self.max_item, "-t", "2"]
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

    def set(self, key, value):
        reply = self._call(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value),
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


def remote_lease(source, relpath, base):
    """The key of the lease on that value's decode (jfs1l: and the same
    digest)."""
    return "jfs1l:" + remote_key(source, relpath, base)[len("jfs1:"):]


def require_memcached():
    if not os.access(MEMCACHED, os.X_OK):
        raise unittest.SkipTest("memcached not installed (scripts/setup.sh)")
