# scripts/lib.sh — shared steps of scripts/demo and scripts/test: install the
# Debian packages zen needs (only the missing ones), create the Python venv
# (.venv/: torch 2.13 and the pinned packages of python/requirements.txt, from
# PyPI), then configure and build Release into build/; and the one sanitizer
# build that scripts/fuzz-smoke and scripts/soak share. Sourced, not run.
set -euo pipefail

ZEN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZEN_BUILD=${ZEN_BUILD:-$ZEN_ROOT/build}
ZEN_VENV=${ZEN_VENV:-$ZEN_ROOT/.venv}
# clang-14 with ASan + UBSan (+ libFuzzer's coverage on the libraries):
# scripts/fuzz-smoke and scripts/soak build their targets here, so the
# libraries are compiled with sanitizers once, not once per script.
ZEN_SANITIZE_BUILD=${ZEN_SANITIZE_BUILD:-$ZEN_ROOT/build-sanitize}

# Everything zen needs, from Debian.
ZEN_PACKAGES=(
  cmake g++ make pkg-config
  libgloo-dev libhiredis-dev redis-server nlohmann-json3-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest
  python3-torch python3-sentencepiece python3-matplotlib dict-gcide
  iproute2 clang libclang-rt-14-dev libopenmpi-dev openmpi-bin
)
ZEN_PACKAGES+=(python3-venv ccache)  # zen_venv; ccache speeds up the `pip install .` test
# What scripts/demo needs: the compiler and the libraries of the `zen` tool
# (Gloo, hiredis for its redis:// rendezvous, nlohmann-json). No test,
# benchmark, Python or MPI packages.
ZEN_DEMO_PACKAGES=(cmake g++ make pkg-config libgloo-dev libhiredis-dev nlohmann-json3-dev)

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\nerror: %s\n' "$*" >&2; exit 1; }

# zen_install_packages [PACKAGE...]: installs those of PACKAGE (default: all
# of ZEN_PACKAGES) that are missing.
zen_install_packages() {
  local wanted=("${ZEN_PACKAGES[@]}")
  if [ $# -gt 0 ]; then wanted=("$@"); fi
  say "checking Debian packages"
  local missing=()
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "all ${#wanted[@]} packages present"
    return
  fi
  echo "missing: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: install as root: apt-get install ${missing[*]}"
    sudo=sudo
  fi
  say "installing ${#missing[@]} packages with apt-get"
  $sudo apt-get update -q || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install failed for: ${missing[*]}"
}

# zen_venv: creates $ZEN_VENV (default .venv/) from /usr/bin/python3 and
# installs python/requirements.txt (torch 2.13.0 CPU, numpy, pytest, pybind11,
# ...) and python/requirements-recipes.txt (Lightning, accelerate) from PyPI,
# in one pip command so that torch's pin holds for both. Idempotent: when the
# venv's stamp matches the requirements files it returns at once, without
# calling pip. Sets ZEN_VENV_PYTHON, which
# zen_build then passes as -DZEN_PYTHON so that zen._zen is built for this
# interpreter with the venv's pybind11.
zen_venv() {
  local req="$ZEN_ROOT/python/requirements.txt" recipes="$ZEN_ROOT/python/requirements-recipes.txt"
  local stamp="$ZEN_VENV/.zen-requirements"
  ZEN_VENV_PYTHON="$ZEN_VENV/bin/python"
  if [ -x "$ZEN_VENV_PYTHON" ] && [ -f "$stamp" ] && cat "$req" "$recipes" | cmp -s - "$stamp"; then
    echo "venv $ZEN_VENV up to date"
    return
  fi
  say "Python venv $ZEN_VENV (torch 2.13.0 CPU and python/requirements.txt, from PyPI)"
  if [ ! -x "$ZEN_VENV_PYTHON" ]; then
    /usr/bin/python3 -m venv "$ZEN_VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
  fi
  "$ZEN_VENV_PYTHON" -m pip install -q --disable-pip-version-check -r "$req" -r "$recipes" \
    || die "pip install -r python/requirements.txt -r python/requirements-recipes.txt failed (PyPI reachable?)"
  cat "$req" "$recipes" >"$stamp"
}

# zen_build [CMAKE_ARG...]: configures $ZEN_BUILD (Release; the tests, the
# benchmarks and the Python extension on, since scripts/demo may have turned
# them off in the same build folder; CMAKE_ARG after these overrides them) and
# builds the targets of ZEN_BUILD_TARGETS (default: all).
zen_build() {
  say "configuring Release build in $ZEN_BUILD"
  mkdir -p "$ZEN_BUILD"
  local python_args=() target_args=()
  if [ -n "${ZEN_VENV_PYTHON:-}" ]; then python_args=(-DZEN_PYTHON="$ZEN_VENV_PYTHON"); fi
  for t in ${ZEN_BUILD_TARGETS:-}; do target_args+=(--target "$t"); done
  cmake -S "$ZEN_ROOT" -B "$ZEN_BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DZEN_BUILD_TESTS=ON -DZEN_BUILD_BENCH=ON -DZEN_BUILD_PYTHON=ON "${python_args[@]}" "$@" \
    >"$ZEN_BUILD/configure.log" 2>&1 \
    || { cat "$ZEN_BUILD/configure.log"; die "cmake configure failed (log above)"; }
  say "building ${ZEN_BUILD_TARGETS:-all targets} ($(nproc) jobs)"
  cmake --build "$ZEN_BUILD" -j"$(nproc)" "${target_args[@]}" \
    || die "build failed (see the compiler output above)"
}

# zen_configure_sanitizers: configure $ZEN_SANITIZE_BUILD (RelWithDebInfo,
# clang-14, -DZEN_SANITIZE=ON, fuzz targets and tests declared; callers build
# only the targets they run). The same options every time, so a second call
# reuses the first one's objects.
zen_configure_sanitizers() {
  say "configuring $ZEN_SANITIZE_BUILD (clang-14, ASan + UBSan, libFuzzer)"
  cmake -S "$ZEN_ROOT" -B "$ZEN_SANITIZE_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DZEN_BUILD_FUZZ=ON -DZEN_SANITIZE=ON \
    -DZEN_BUILD_TESTS=ON -DZEN_BUILD_BENCH=OFF -DZEN_BUILD_PYTHON=OFF \
    >"$ZEN_SANITIZE_BUILD.configure.log" 2>&1 \
    || { cat "$ZEN_SANITIZE_BUILD.configure.log"; die "cmake configure failed (log above)"; }
}
