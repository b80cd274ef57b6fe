"""What the comparison bench needs beyond the project, installed by the bench itself.

* etcd 3.4 and wrk: Debian's ``etcd-server`` and ``wrk`` packages (``apt-get``, as root);
  ``etcdctl`` (the lease bench's locks): ``etcd-client``;
* PySyncObj and matplotlib: the project's ``bench`` extra (``pip install -e '.[bench]'``),
  installed into the running interpreter's environment.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

DEBIAN_PACKAGES = {"etcd": "etcd-server", "wrk": "wrk"}
PYTHON_PACKAGES = {"pysyncobj": "pysyncobj>=0.3.12", "matplotlib": "matplotlib>=3.7"}


def missing_binaries() -> list[str]:
    return [b for b in DEBIAN_PACKAGES if shutil.which(b) is None]


def missing_modules() -> list[str]:
    return [m for m in PYTHON_PACKAGES if importlib.util.find_spec(m) is None]


def ensure_binaries(packages_by_binary: dict[str, str], log: Callable[[str], None]) -> None:
    """Install the Debian packages of the binaries that are not on PATH (as root, with
    apt-get); raise with the manual fix when that is not possible."""
    binaries = [b for b in packages_by_binary if shutil.which(b) is None]
    if binaries:
        packages = sorted({packages_by_binary[b] for b in binaries})
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            raise RuntimeError(
                f"{', '.join(binaries)} not found; install them with: "
                f"sudo apt-get install -y {' '.join(packages)}")
        log(f"installing {' '.join(packages)} with apt-get ...")
        subprocess.run(["apt-get", "install", "-y", "-q", *packages], check=True,
                       stdout=subprocess.DEVNULL)


def ensure_tools(log: Callable[[str], None]) -> None:
    """Install whatever is missing; raise with the manual fix when that is not possible."""
    ensure_binaries(DEBIAN_PACKAGES, log)
    modules = missing_modules()
    if modules:
        specs = [PYTHON_PACKAGES[m] for m in modules]
        log(f"installing {' '.join(specs)} with pip ...")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *specs], check=True)
        importlib.invalidate_caches()


def tool_versions() -> dict[str, str]:
    """The versions that go into the results header."""
    versions: dict[str, str] = {}
    etcd = subprocess.run(["etcd", "--version"], check=False, capture_output=True, text=True)
    versions["etcd"] = etcd.stdout.splitlines()[0].split()[-1] if etcd.stdout else "?"
    wrk = subprocess.run(["wrk", "--version"], check=False, capture_output=True, text=True)
    words = (wrk.stdout or wrk.stderr).split()
    versions["wrk"] = words[1] if len(words) > 1 else "?"
    from importlib.metadata import version

    versions["pysyncobj"] = version("pysyncobj")
    versions["python"] = sys.version.split()[0]
    return versions
