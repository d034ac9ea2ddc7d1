"""`fedjax-appeal install-data`: Debian's Fashion-MNIST package, installed when missing."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..core.config import ConfigError
from ..data.sources import FMNIST_DEFAULT_DIR
from .commands import Subcommand


def subcommand() -> Subcommand:
    return Subcommand(lambda p: None, cmd_install_data,
                      "install Debian's Fashion-MNIST package if it is missing",
                      computes=False)


def cmd_install_data(args: argparse.Namespace) -> int:
    """Install Debian's dataset-fashion-mnist when missing (root, or sudo available)."""
    if Path(FMNIST_DEFAULT_DIR, "train-images-idx3-ubyte.gz").is_file():
        print(f"Fashion-MNIST is present in {FMNIST_DEFAULT_DIR}")
        return 0
    if shutil.which("apt-get") is None:
        raise ConfigError("Fashion-MNIST is missing and apt-get is not available: download the "
                          "four IDX .gz files and pass --fmnist-dir DIR")
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        raise ConfigError("Fashion-MNIST is missing: run 'sudo apt-get install "
                          "dataset-fashion-mnist' as an administrator, or pass --fmnist-dir DIR")
    print("installing dataset-fashion-mnist with apt-get ...", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    ok = subprocess.call(prefix + ["apt-get", "install", "-y", "-q", "dataset-fashion-mnist"],
                         env=env) == 0
    if not ok:
        ok = (subprocess.call(prefix + ["apt-get", "update", "-q"], env=env) == 0 and
              subprocess.call(prefix + ["apt-get", "install", "-y", "-q",
                                        "dataset-fashion-mnist"], env=env) == 0)
    if not ok:
        raise ConfigError("apt-get could not install dataset-fashion-mnist: install it by hand "
                          "or pass --fmnist-dir DIR")
    return 0

