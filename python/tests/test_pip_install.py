"""``pip install python/`` in a fresh virtual environment, as a venv, pyenv
or conda user does it; nothing is downloaded.

The venv is made with this interpreter (``python -m venv``: pip and, on
Python 3.11, setuptools come from the standard library's bundled wheels).
Its only way to numpy, the package's one dependency, is a ``.pth`` line
naming the folder this interpreter has numpy in, so pip finds it satisfied
and installs from the source tree alone (``--no-index
--no-build-isolation``).  Then, from a folder outside the tree and without
PYTHONPATH, the package imports from the venv's site-packages and the
record-parsing tests (test_stream) pass against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent  # python/, with pyproject.toml


class PipInstallTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        folder = tempfile.TemporaryDirectory(prefix="joaderfs-pip-")
        cls.addClassCleanup(folder.cleanup)
        cls.root = Path(folder.name)
        cls.venv = cls.root / "venv"
        # The venv's interpreter, not this one's: no PYTHONPATH, no
        # source tree.
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "PYTHONHOME")}
        cls.env.update(PYTHONDONTWRITEBYTECODE="1", PIP_NO_INDEX="1",
                       PIP_DISABLE_PIP_VERSION_CHECK="1")
        subprocess.run([sys.executable, "-m", "venv", str(cls.venv)],
                       check=True, env=cls.env, cwd=cls.root)
        cls.python = cls.venv / "bin" / "python"
        purelib = subprocess.run(
            [str(cls.python), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, env=cls.env
        ).stdout.strip()
        cls.site = Path(purelib)
        numpy_folder = Path(numpy.__file__).resolve().parents[1]
        (cls.site / "numpy-of-the-test-interpreter.pth").write_text(
            f"{numpy_folder}\n")
        # pip builds in the folder it is given: a copy of python/'s
        # package and pyproject.toml, so the checkout stays clean.
        project = cls.root / "project"
        shutil.copytree(PROJECT / "joaderfs", project / "joaderfs",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(PROJECT / "pyproject.toml", project)
        cls.install = subprocess.run(
            [str(cls.python), "-m", "pip", "install", "--no-index",
             "--no-build-isolation", str(project)],
            capture_output=True, text=True, env=cls.env, cwd=cls.root)

    def run_venv(self, *args: str, cwd: Path | None = None
                 ) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), *args], env=self.env,
                              cwd=cwd or self.root, capture_output=True,
                              text=True)

    def test_installs_and_imports(self) -> None:
        self.assertEqual(self.install.returncode, 0,
                         self.install.stdout + self.install.stderr)
        r = self.run_venv("-c", "import joaderfs; print(joaderfs.__file__);"
                          " print(joaderfs.__version__)")
        self.assertEqual(r.returncode, 0, r.stderr)
        path, version = r.stdout.split()
        self.assertEqual(Path(path).parent, self.site / "joaderfs")
        self.assertRegex(version, r"^\d+\.\d+\.\d+$")
        r = self.run_venv("-m", "pip", "show", "joaderfs")
        self.assertIn(f"Version: {version}", r.stdout)

    def test_stream_tests_pass_on_the_installed_copy(self) -> None:
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        scratch = self.root / "tests"
        scratch.mkdir(exist_ok=True)
        (scratch / "test_stream.py").write_bytes(
            (HERE / "test_stream.py").read_bytes())
        r = self.run_venv("-m", "unittest", "test_stream", cwd=scratch)
        self.assertEqual(r.returncode, 0, r.stderr[-5000:])
        self.assertRegex(r.stderr, r"\nOK")

    def test_leaves_a_checkout_clean(self) -> None:
        """``pip install ./python`` in a checkout, as the README says: the
        build folder and egg-info that setuptools leaves in python/ are
        ignored by git, so the work tree stays clean."""
        git = shutil.which("git")
        if git is None:
            self.skipTest("no git")
        tree = self.root / "checkout"
        shutil.copytree(PROJECT / "joaderfs", tree / "python" / "joaderfs",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(PROJECT / "pyproject.toml", tree / "python")
        shutil.copy(PROJECT.parent / ".gitignore", tree)

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(args, cwd=tree, capture_output=True,
                                  text=True, env=self.env)
        self.assertEqual(run(git, "init", "-q").returncode, 0)
        self.assertEqual(run(git, "add", "-A").returncode, 0)
        r = run(str(self.python), "-m", "pip", "install", "--no-index",
                "--no-build-isolation", "./python")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        left = [line for line in run(git, "status", "--porcelain",
                                     "--untracked-files=all").stdout
                .splitlines() if line.startswith("??")]
        self.assertEqual(left, [])
        # setuptools did leave them: the ignore is what keeps git clean.
        self.assertTrue((tree / "python" / "build").exists() or
                        any((tree / "python").glob("*.egg-info")))


if __name__ == "__main__":
    unittest.main()
