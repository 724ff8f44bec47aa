"""systemd's Type=notify and watchdog, as the unit runs the daemon (-f):
READY=1 comes once the mount serves, WATCHDOG=1 every second while
WatchdogSec= is set, STOPPING=1 at the unmount. A NOTIFY_SOCKET of the
test's own stands in for systemd."""

import os
import shutil
import socket
import tempfile
import time
import unittest

import harness

LAYOUT = {"ant": ["a0.jpg", "a1.jpg"], "bee": ["b0.jpg"]}


class NotifyTest(harness.TierTestCase):

    def test_ready_watchdog_and_stopping(self):
        workdir = tempfile.mkdtemp(prefix="joaderfs-notify-")
        self.addCleanup(shutil.rmtree, workdir, True)
        source = harness.make_imagefolder(os.path.join(workdir, "src"), LAYOUT)
        path = os.path.join(workdir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.bind(path)
        sock.settimeout(30)
        self.set_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        m = self.mount(source, foreground=True)
        messages = []

        def until(word):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                text = sock.recv(4096).decode()
                messages.append((time.monotonic(), text))
                if word in text:
                    return text
            self.fail("no %s: %r" % (word, messages))
        ready = until("READY=1")
        # READY=1 is sent once the mount serves.
        self.assertTrue(harness.is_mounted(m.mnt))
        self.assertIn("STATUS=serving", ready)
        first = until("WATCHDOG=1")
        t0 = time.monotonic()
        until("WATCHDOG=1")
        self.assertLess(time.monotonic() - t0, 2.0, "watchdog pings too far apart")
        self.assertTrue(first)
        m.unmount()
        until("STOPPING=1")


if __name__ == "__main__":
    unittest.main()
