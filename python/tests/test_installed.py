"""The package as ``cmake --install`` puts it in place, not the source tree.

Installs the build folder ($JOADERFS_BUILD_DIR) into a temporary prefix,
checks what landed there, and runs the record-parsing tests (test_stream)
against the installed copy in a fresh interpreter.  Also checks that the
folder the package goes to under the configured prefix is on the
interpreter's default path, so that after ``cmake --install build`` into
/usr/local the package imports without PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "joaderfs"
BUILD = os.environ.get("JOADERFS_BUILD_DIR")
PYTHON_DIR = os.environ.get("JOADERFS_PYTHON_DIR", "")
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")


@unittest.skipUnless(BUILD, "JOADERFS_BUILD_DIR is not set (run by ctest)")
class InstalledTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        folder = tempfile.TemporaryDirectory(prefix="joaderfs-install-")
        cls.addClassCleanup(folder.cleanup)
        cls.prefix = Path(folder.name)
        subprocess.run([CMAKE, "--install", BUILD, "--prefix",
                        str(cls.prefix)], check=True,
                       stdout=subprocess.DEVNULL)
        cls.site = cls.prefix / PYTHON_DIR
        # Neither the source tree nor the caller's path: only the prefix.
        cls.env = dict(os.environ, PYTHONPATH=str(cls.site),
                       PYTHONDONTWRITEBYTECODE="1")

    def python(self, *args: str, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], env=self.env,
                              cwd=cwd or self.prefix, capture_output=True,
                              text=True)

    def test_files(self) -> None:
        installed = sorted(p.name for p in (self.site / "joaderfs").iterdir())
        self.assertEqual(installed,
                         sorted(p.name for p in SOURCE.glob("*.py")))
        self.assertTrue((self.prefix / "bin" / "joaderfs").is_file())

    def test_imports_the_installed_copy(self) -> None:
        r = self.python("-c", "import joaderfs; print(joaderfs.__file__); "
                        "print(joaderfs.__version__); joaderfs.JobDataset")
        self.assertEqual(r.returncode, 0, r.stderr)
        path, version = r.stdout.split()
        self.assertEqual(Path(path), self.site / "joaderfs" / "__init__.py")
        self.assertEqual(version, os.environ["JOADERFS_VERSION"])

    def test_stream_tests_pass_on_the_installed_copy(self) -> None:
        # test_stream.py is copied next to nothing else, so that
        # `import joaderfs` can only find the installed package.
        scratch = self.prefix / "tests"
        scratch.mkdir(exist_ok=True)
        (scratch / "test_stream.py").write_bytes(
            (HERE / "test_stream.py").read_bytes())
        r = self.python("-m", "unittest", "test_stream", cwd=scratch)
        self.assertEqual(r.returncode, 0, r.stderr[-5000:])
        self.assertRegex(r.stderr, r"\nOK")

    def test_default_prefix_is_on_the_default_path(self) -> None:
        prefix = os.environ.get("JOADERFS_INSTALL_PREFIX", "/usr/local")
        if prefix not in ("/usr/local", "/usr"):
            self.skipTest(f"install prefix {prefix} is not a system one")
        r = subprocess.run([sys.executable, "-c",
                            "import sys; print('\\n'.join(sys.path))"],
                           env={"PATH": os.environ.get("PATH", "")},
                           capture_output=True, text=True, check=True)
        self.assertIn(os.path.join(prefix, PYTHON_DIR), r.stdout.split("\n"))


if __name__ == "__main__":
    unittest.main()
