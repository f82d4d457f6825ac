"""`pip install .` (pyproject.toml: scikit-build-core + pybind11, the C++
dependencies from Debian) into a fresh venv, then the DDP example from that
venv under torchrun on 2 ranks, with zen imported from the installed package
(no PYTHONPATH) and zen.__version__ equal to CMakeLists.txt's project(VERSION).
Then the `zen` command that the same install put into the venv's bin/, with
nothing pointing into the source tree (no $ZEN_DEFAULT_TRACE, $ZEN_PLOT_SCRIPT,
$ZEN_TORCH_PEER, $ZEN_PYTHON), so that it finds its trace and plot scripts in
the venv's share/zen/: `zen --version` and `python -m zen --version` (the
project's version), `zen bench --world 2` on the shipped trace (exit 0: every
scheme's sum equals the bench's dense reference), `zen analyze --plot DIR` on
the installed trace (the PNGs written), and `torchrun --no_python zen bench
--rendezvous env://` on 2 ranks.

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
        # The build folder is a new temporary path on every run and is on the
        # compile lines (-I<build>/include); with base_dir / ccache hashes
        # every path relative to the build folder, so a repeated run hits.
        env["CCACHE_BASEDIR"] = "/"
    # Every core for the build (a Makefile generator builds serially unless
    # told; Ninja, when scikit-build-core finds it, uses them anyway).
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
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

    # The `zen` command: installed beside the venv's python, data under share/zen.
    bindir = venv / "bin"
    zen = bindir / "zen"
    assert zen.is_file() and os.access(zen, os.X_OK), sorted(p.name for p in bindir.iterdir())
    trace = venv / "share" / "zen" / "traces" / "gcide-lm-n8.safetensors"
    assert trace.is_file()
    cli_env = dict(env)
    for name in ("ZEN_DEFAULT_TRACE", "ZEN_PLOT_SCRIPT", "ZEN_TORCH_PEER", "ZEN_PYTHON"):
        cli_env.pop(name, None)
    cli_env["PATH"] = str(bindir) + os.pathsep + env.get("PATH", "/usr/bin:/bin")

    def cli(args, timeout=120):
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=cli_env, cwd=where, timeout=timeout)
        assert out.returncode == 0, f"{args}: exit {out.returncode}\n{out.stdout}"
        return out.stdout

    assert cli(["zen", "--version"]).strip() == "zen " + cmake_version()
    assert cli([str(python), "-m", "zen", "--version"]).strip() == "zen " + cmake_version()

    schemes = ("dense", "agsparse", "sparcml", "omnireduce", "sparse_ps", "zen", "auto")
    bench = cli(["zen", "bench", "--world", "2", "--iters", "2"])
    assert "gcide-lm-n8.safetensors" in bench, bench
    for scheme in schemes:
        assert re.search(rf"^{scheme}\s+\d", bench, re.M), bench

    plots = tmp_path / "plots"
    analyze = cli(["zen", "analyze", str(trace), "--plot", str(plots)])
    assert "embedding" in analyze, analyze
    for png in ("densification.png", "overlap.png", "skew_heatmap.png"):
        assert (plots / png).stat().st_size > 0, analyze

    # One worker per rank, started by torchrun: `zen` found on PATH (--no_python).
    ranks = cli([str(python), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                 "2", "--no_python", "zen", "bench", "--rendezvous", "env://", "--iters", "2"],
                timeout=150)
    for scheme in schemes:
        assert re.search(rf"^{scheme}\s+\d", ranks, re.M), ranks
