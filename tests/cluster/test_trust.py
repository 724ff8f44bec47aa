"""What a shared tier may believe (docs/design.md 3.2, "Threat model"): no
host that reaches memcached, no local user who binds its port, and no
daemon without the cluster key can make a job receive a sample other than
the decode of its own SOURCE bytes, make the daemon exit, or grow it past
its bound. Real memcached servers (with TLS and client certificates where
that is the subject) and hostile servers of our own on loopback; every
daemon mounted as users mount it; all reaped on failure.

- values forged by a daemon with another key over a tampered copy of the
  dataset (same paths, sizes and mtimes), put under the victim's names, and
  raw bytes: rejected, never served, never written to the disk tier (a
  remount serves the real pixels from it);
- a server that answers with the wrong kind of reply, random bytes, a
  value declared 3 GB, or nothing at all: the epoch is whole and right, the
  daemon lives, its memory stays bounded and the epoch is not stalled;
- TLS with client certificates against memcached -Z; a daemon without a
  certificate is refused by the server and still serves its jobs;
- leases planted by an attacker are not waited on;
- key rotation: values sealed with the old key are read, never written;
- after a compromise, purge_disk_cache=1 empties a node's disk tier of
  what it kept (forgeries taken under remote_key=insecure);
- a tier without a key, or with a key file others can read, is refused.
"""

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import TierTestCase, digests, log, read_epoch
from harness.memcached import (CALM_REMOTE_TIMEOUT, HostileMemcached, Memcached,
                               make_photos, remote_key, require_memcached, wait_published,
                               write_cluster_key)

N = 96
BASE = 128
SIZE = 64


def tampered_copy(source, order, dest):
    """Other pictures under the same relative paths, padded after EOI to
    the same sizes, with the same mtimes: the key material of every file is
    the original's."""
    make_photos(dest, len(order), seed=99, quality=40)
    for rel, _ in order:
        real, fake = os.path.join(source, rel), os.path.join(dest, rel)
        size = os.path.getsize(real)
        with open(fake, "r+b") as f:
            data = f.read()
            assert len(data) <= size, "the forged picture is larger than the real one"
            f.write(b"\0" * (size - len(data)))
        st = os.stat(real)
        os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns))
    return dest


def as_another_user(writes):
    """memcached sets of (host, port, key, value), sent by uid 65534."""
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
        pickle.dump(writes, f)
    os.chmod(f.name, 0o644)
    script = (
        "import pickle, socket, sys\n"
        "for host, port, key, value in pickle.load(open(sys.argv[1], 'rb')):\n"
        "    with socket.create_connection((host, port), 2) as s:\n"
        "        s.sendall(b'set %s 0 0 %d\\r\\n%s\\r\\n' % (key.encode(), len(value), value))\n"
        "        assert s.recv(64) == b'STORED\\r\\n'\n")
    try:
        subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-c", script, f.name], check=True, timeout=60)
    finally:
        os.unlink(f.name)


class TrustTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        require_memcached()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-trust-")
        cls.source, cls.order = make_photos(os.path.join(cls._data, "src"), N)
        cls.key_file = os.path.join(cls._data, "cluster.key")
        cls.key = write_cluster_key(cls.key_file)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def servers(self, n=2, **kw):
        out = []
        for _ in range(n):
            s = Memcached(**kw)
            self.addCleanup(s.cleanup)
            out.append(s.start())
        return out

    def node(self, addresses, source=None, key_file=None, failing=False, **extra):
        """A daemon over `addresses`; its calls get CALM_REMOTE_TIMEOUT
        unless a failing server is the subject (`failing`)."""
        opts = {"cache_dir": "none", "base": str(BASE), "size": str(SIZE),
                "ram_cache": "64M", "threads": "2", "seed": "3",
                "remote_cache": "memcached://" + "+".join(addresses),
                "remote_key": key_file or self.key_file}
        if not failing:
            opts["remote_timeout"] = CALM_REMOTE_TIMEOUT
        opts.update({k: v if v is False else str(v) for k, v in extra.items()})
        return self.mount(source or self.source, opts)

    def epoch(self, m, job):
        m.mkjob(job)
        recs = read_epoch(m.path("jobs", job, "next"), 1, timeout=120)[0]
        self.assertEqual(sorted(r.id for r in recs), list(range(N)), "not each id once")
        return recs

    def truth(self):
        """The pixels of an epoch decoded from SOURCE, with no remote tier."""
        if not hasattr(type(self), "_truth"):
            m = self.mount(self.source, {"cache_dir": "none", "base": str(BASE),
                                         "size": str(SIZE), "ram_cache": "64M", "seed": "3"})
            type(self)._truth = digests(self.epoch(m, "truth"))
            self.clean_unmount(m)
        return type(self)._truth

    def test_values_forged_without_the_key_are_rejected(self):
        servers = self.servers()
        addresses = [s.address for s in servers]
        fake_src = tampered_copy(self.source, self.order, os.path.join(self._data, "fake"))
        fake_key_file = os.path.join(self._data, "attacker.key")
        fake_key = write_cluster_key(fake_key_file)
        attacker = self.node(addresses, source=fake_src, key_file=fake_key_file)
        forged = self.epoch(attacker, "publish")
        wait_published(attacker, N)
        self.clean_unmount(attacker)
        self.assertNotEqual(digests(forged), self.truth(), "the copy was not tampered")
        # Another user of the machine (uid 65534) moves every forged value
        # under the victim's name (on every server: it cannot tell the
        # name's home), and writes raw bytes under a few more.
        writes = []
        for k, (rel, _) in enumerate(self.order):
            name = remote_key(self.source, rel, BASE, self.key)
            value = None
            for s in servers:
                value = value or s.get(remote_key(fake_src, rel, BASE, fake_key))
            self.assertIsNotNone(value, "the attacker's value of %s is missing" % rel)
            for s in servers:
                writes.append((s.host, s.port, name, value if k % 8 else b"\xff" * len(value)))
        as_another_user(writes)
        cache_dir = os.path.join(self._data, "victim-cache")
        victim = self.node(addresses, cache_dir=cache_dir, disk_cache="64M")
        got = digests(self.epoch(victim, "train"))
        st = victim.stats()
        log("forged: rejected %d, remote hits %d, decoded %d", st["remote_rejected"],
            st["remote_hits"], st["decoded"])
        self.assertEqual(got, self.truth(), "a forged value reached a job")
        self.assertEqual(st["remote_hits"], 0)
        self.assertEqual(st["remote_rejected"], N)
        self.assertEqual(st["decoded"], N)
        with open(victim.log_path, errors="replace") as f:
            self.assertIn("rejected a value", f.read())
        # The disk tier holds the victim's own decodes: a remount with the
        # tier off serves them, and they are the real pictures.
        self.clean_unmount(victim)
        again = self.mount(self.source, {"cache_dir": cache_dir, "disk_cache": "64M",
                                         "base": str(BASE), "size": str(SIZE),
                                         "ram_cache": "64M", "seed": "3"})
        self.assertEqual(digests(self.epoch(again, "again")), self.truth())
        self.assertEqual(again.stats()["disk_hits"], N)

    def hostile(self, mode):
        bad = HostileMemcached(mode)
        self.addCleanup(bad.cleanup)
        good = self.servers(1)[0]
        # ram_cache=4M holds a fraction of the set: each epoch asks the tier
        # again, and a second after each failure the hostile server is
        # probed again.
        m = self.node([good.address, bad.address], failing=True, ram_cache="4M")
        worst = 0
        for k in range(3):
            time.sleep(1.05)
            t0 = time.monotonic()
            got = digests(self.epoch(m, "j%d" % k))
            worst = max(worst, time.monotonic() - t0)
            self.assertEqual(got, self.truth(), "a hostile server's reply reached a job")
        st = m.stats()
        hwm = m.hwm_kib() >> 10
        log("hostile %s: slowest epoch %.1f s, %d connections, remote errors %d, hits %d, "
            "peak RSS %d MiB", mode, worst, bad.connections, st["remote_errors"],
            st["remote_hits"], hwm)
        self.assertGreaterEqual(bad.connections, 3, "the hostile server was not asked again")
        self.assertGreaterEqual(st["remote_errors"], 3)
        self.assertGreater(st["remote_hits"], 0, "the good server went unused")
        self.assertIsNone(m.proc.poll(), "the daemon died")
        self.assertLess(hwm, 300, "the daemon grew past its bound")
        # Each failed call costs at most the timeout (100 ms), then the
        # server is passed by for a second.
        self.assertLess(worst, 5, "the hostile server stalled an epoch")

    def test_a_reply_of_the_wrong_kind(self):
        self.hostile("wrong")

    def test_random_bytes(self):
        self.hostile("garbage")

    def test_a_value_declared_3_gb(self):
        self.hostile("huge")

    def test_a_server_that_never_answers(self):
        self.hostile("silent")

    def test_tls_with_client_certificates(self):
        pki = os.path.join(self._data, "pki")
        os.makedirs(pki, exist_ok=True)
        ossl = lambda *a: subprocess.run(["openssl"] + list(a), cwd=pki, check=True,
                                         capture_output=True)
        ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test ca")
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1"),
                          ("client", "extendedKeyUsage=clientAuth")):
            ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name)
            with open(os.path.join(pki, name + ".ext"), "w") as f:
                f.write(ext + "\n")
            ossl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext")
        client = os.path.join(pki, "client-with-key.pem")
        with open(client, "w") as out:
            for part in ("client.pem", "client.key"):
                with open(os.path.join(pki, part)) as f:
                    out.write(f.read())
        os.chmod(client, 0o600)
        tls = ["-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=2"
               % tuple(os.path.join(pki, f) for f in ("server.pem", "server.key", "ca.pem"))]
        servers = self.servers(extra_args=tls)
        addresses = [s.address for s in servers]
        ca = os.path.join(pki, "ca.pem")
        a = self.node(addresses, remote_tls=ca, remote_tls_cert=client)
        self.assertEqual(digests(self.epoch(a, "j")), self.truth())
        wait_published(a, N)
        self.assertEqual(a.stats()["remote_errors"], 0)
        b = self.node(addresses, remote_tls=ca, remote_tls_cert=client)
        self.assertEqual(digests(self.epoch(b, "j")), self.truth())
        self.assertEqual(b.stats()["remote_hits"], N, "values did not travel over TLS")
        # Without a certificate the servers refuse the handshake: misses,
        # and the jobs are served all the same.
        c = self.node(addresses, remote_tls=ca)
        self.assertEqual(digests(self.epoch(c, "j")), self.truth())
        st = c.stats()
        self.assertEqual(st["remote_hits"], 0)
        self.assertGreater(st["remote_errors"], 0)
        # Plain TCP to a TLS server gets nothing either.
        d = self.node(addresses)
        self.assertEqual(digests(self.epoch(d, "j")), self.truth())
        self.assertEqual(d.stats()["remote_hits"], 0)

    def test_key_rotation(self):
        servers = self.servers()
        addresses = [s.address for s in servers]
        old_file = os.path.join(self._data, "old.key")
        write_cluster_key(old_file)
        new_file = os.path.join(self._data, "new.key")
        write_cluster_key(new_file)
        a = self.node(addresses, key_file=old_file)
        self.epoch(a, "j")
        wait_published(a, N)
        self.clean_unmount(a)
        b = self.node(addresses, key_file=new_file, remote_old_key=old_file)
        self.assertEqual(digests(self.epoch(b, "j")), self.truth())
        st = b.stats()
        self.assertEqual(st["remote_hits"], N, "the old key's values were not read")
        self.assertEqual(st["remote_published"], 0, "a value was written again")
        # Without the old key they no longer open: rotation retires them.
        c = self.node(addresses, key_file=new_file)
        self.epoch(c, "j")
        self.assertEqual(c.stats()["remote_hits"], 0)

    def test_forged_leases_are_not_waited_on(self):
        # Lease names follow from value names, which anyone can list: an
        # attacker deletes every value and plants leases of its own, with
        # long expiries. Believed, each would hold its load 0.5 s (48 s of
        # waits over 2 threads here); not authentic, none is waited on.
        servers = self.servers()
        addresses = [s.address for s in servers]
        a = self.node(addresses)
        self.epoch(a, "j")
        wait_published(a, N)
        self.clean_unmount(a)
        for rel, _ in self.order:
            name = remote_key(self.source, rel, BASE, self.key)
            for s in servers:
                s.delete(name)
                s.set("jfs2l:" + name[len("jfs2:"):], os.urandom(24), ttl=60)
        b = self.node(addresses)
        t0 = time.monotonic()
        self.assertEqual(digests(self.epoch(b, "j")), self.truth())
        elapsed = time.monotonic() - t0
        st = b.stats()
        log("forged leases: %.1f s, lease waits %d, rejected %d, decoded %d", elapsed,
            st["remote_lease_waits"], st["remote_rejected"], st["decoded"])
        self.assertEqual(st["remote_lease_waits"], 0, "a forged lease was waited on")
        self.assertEqual(st["remote_rejected"], N)
        self.assertLess(elapsed, 10)

    def test_purge_after_a_compromise(self):
        # A cluster that ran with remote_key=insecure: a daemon over a
        # tampered copy publishes forgeries that open, and the victim's
        # disk tier keeps them. The admin rotates to a real key; the disk
        # tier still serves the forgeries until purge_disk_cache=1.
        servers = self.servers()
        addresses = [s.address for s in servers]
        fake_src = tampered_copy(self.source, self.order, os.path.join(self._data, "fake2"))
        attacker = self.node(addresses, source=fake_src, remote_key="insecure")
        forged = digests(self.epoch(attacker, "publish"))
        wait_published(attacker, N)
        self.clean_unmount(attacker)
        cache_dir = os.path.join(self._data, "compromised-cache")
        victim = self.node(addresses, remote_key="insecure", cache_dir=cache_dir,
                           disk_cache="64M")
        self.assertEqual(digests(self.epoch(victim, "j")), forged,
                         "remote_key=insecure did not take the forgeries (the test's premise)")
        self.clean_unmount(victim)
        rotated = self.node(addresses, cache_dir=cache_dir, disk_cache="64M")
        self.assertEqual(digests(self.epoch(rotated, "j2")), forged,
                         "the disk tier no longer held the forgeries (the test's premise)")
        self.clean_unmount(rotated)
        purged = self.node(addresses, cache_dir=cache_dir, disk_cache="64M",
                           purge_disk_cache=1)
        self.assertEqual(digests(self.epoch(purged, "j3")), self.truth(),
                         "a forgery survived the purge")
        st = purged.stats()
        self.assertEqual(st["disk_hits"], 0)
        self.assertEqual(st["decoded"], N)
        with open(purged.log_path, errors="replace") as f:
            self.assertIn("purged", f.read())

    def test_a_tier_without_a_key_or_with_an_open_key_is_refused(self):
        servers = self.servers(1)
        readable = os.path.join(self._data, "readable.key")
        write_cluster_key(readable)
        os.chmod(readable, 0o644)
        for opts, message in (({"remote_key": False}, "remote_cache needs remote_key"),
                              ({"remote_key": readable}, "chmod 600")):
            with self.assertRaises(AssertionError) as e:
                self.node([servers[0].address], **opts)
            self.assertIn(message, str(e.exception))
        m = self.node([servers[0].address], remote_key="insecure")
        self.assertEqual(digests(self.epoch(m, "j")), self.truth())
        with open(m.log_path, errors="replace") as f:
            self.assertIn("remote_key=insecure", f.read())


if __name__ == "__main__":
    unittest.main()
