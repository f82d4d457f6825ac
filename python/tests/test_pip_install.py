"""`pip install .` (pyproject.toml: scikit-build-core + pybind11, the C++
dependencies from Debian) into a fresh venv, then the DDP example from that
venv under torchrun on 2 ranks, with zen imported from the installed package
(no PYTHONPATH) and zen.__version__ equal to CMakeLists.txt's project(VERSION).

The fresh venv sees this interpreter's site-packages (torch 2.13, numpy,
scikit-build-core, pybind11) through a .pth file, so nothing is downloaded:
the build runs without isolation. ccache is used when installed
(CMAKE_CXX_COMPILER_LAUNCHER), which keeps a repeated run to seconds."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

from zen_torch_testing import REPO, rank_env

BOUND_S = 600  # a cold build of the C++ core on 2 loaded cores; seconds with ccache


def cmake_version():
    text = (REPO / "CMakeLists.txt").read_text()
    return re.search(r"project\(zen\s+VERSION\s+([0-9.]+)", text).group(1)


def test_pip_install_then_ddp_example(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, text=True, stdout=subprocess.PIPE)
    site = purelib.stdout.strip()
    with open(os.path.join(site, "zen-test-parent-env.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")

    env = rank_env()
    env.pop("PYTHONPATH", None)  # zen must come from the installed package
    if shutil.which("ccache"):
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
    start = time.monotonic()
    pip = subprocess.run([str(python), "-m", "pip", "install", "--no-build-isolation",
                          "--config-settings=build-dir=" + str(tmp_path / "build"), str(REPO)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         timeout=BOUND_S)
    assert pip.returncode == 0, pip.stdout
    print(f"pip install . took {time.monotonic() - start:.0f} s")

    where = tmp_path / "elsewhere"  # not the source tree: no python/zen on sys.path
    where.mkdir()
    probe = subprocess.run([str(python), "-c", "import zen, zen.torch, torch; "
                            "print(zen.__version__, zen.__file__, torch.__version__)"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           cwd=where, timeout=120)
    assert probe.returncode == 0, probe.stdout
    version, path, torch_version = probe.stdout.split()
    assert version == cmake_version(), probe.stdout
    assert path.startswith(str(venv)), probe.stdout
    assert torch_version.startswith("2."), probe.stdout

    # torchrun is the console script of torch.distributed.run; the fresh venv
    # sees torch through the .pth file but has no console script of its own.
    run = subprocess.run([str(python), "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", str(REPO / "examples" / "train_lm.py"),
                          "--sync", "zen", "--steps", "2", "--vocab", "2000",
                          "--max-paragraphs", "3000", "--batch", "4", "--seq-len", "16",
                          "--width", "16", "--hidden", "32"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         cwd=where, timeout=150)
    assert run.returncode == 0, run.stdout
    assert len(re.findall(r"^step\s+\d+\s+loss \S+", run.stdout, re.M)) == 2, run.stdout
    assert "zen scheme" in run.stdout, run.stdout
