# scripts/lib.sh — shared steps of scripts/demo and scripts/test: install the
# Debian packages zen needs (only the missing ones), create the Python venv
# (.venv/: torch 2.13 and the pinned packages of python/requirements.txt, from
# PyPI), then configure and build Release into build/; and the one sanitizer
# build that scripts/fuzz-smoke and scripts/soak share; and the testbed +
# torchrun launch that scripts/train-testbed and scripts/topk-testbed share.
# Sourced, not run.
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

# --- training jobs on the testbed (scripts/train-testbed, scripts/topk-testbed)

# zen_testbed_check: dies unless this is root (network namespaces and tc),
# $ZEN_BUILD/python/zen exists and $ZEN_VENV's python imports torch. Sets
# ZEN_VENV_PYTHON.
zen_testbed_check() {
  [ "$(id -u)" -eq 0 ] || die "must run as root: the testbed needs network namespaces and tc (try sudo $0)"
  [ -d "$ZEN_BUILD/python/zen" ] \
    || die "no $ZEN_BUILD/python/zen: build first ((source scripts/lib.sh && zen_venv && zen_build))"
  ZEN_VENV_PYTHON=$ZEN_VENV/bin/python
  "$ZEN_VENV_PYTHON" -c "import torch" 2>/dev/null \
    || die "$ZEN_VENV_PYTHON has no torch: create the venv ((source scripts/lib.sh && zen_venv))"
}

# zen_testbed_up TAG HOSTS RATE: brings up HOSTS hosts whose links are shaped
# to RATE both ways (scripts/testbed, namespaces zentb<TAG>-h<i>, host i at
# 10.77.0.<i+1>), after removing any left over under TAG. On every way out
# (EXIT; INT and TERM exit 130) the ranks still running are killed and the
# testbed is removed.
ZEN_TESTBED_TAG=""
ZEN_TESTBED_HOSTS=0
ZEN_TESTBED_PIDS=()
zen_testbed_down() {
  local p
  for p in "${ZEN_TESTBED_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  ZEN_TESTBED_PIDS=()
  [ -z "$ZEN_TESTBED_TAG" ] || "$ZEN_ROOT/scripts/testbed" down "$ZEN_TESTBED_TAG" >/dev/null 2>&1 || true
}
zen_testbed_up() {
  ZEN_TESTBED_TAG=$1 ZEN_TESTBED_HOSTS=$2
  trap zen_testbed_down EXIT
  trap 'exit 130' INT TERM
  zen_testbed_down
  "$ZEN_ROOT/scripts/testbed" up "$2" "$3" "$1" >/dev/null
}

# zen_testbed_torchrun PORT LOG SCRIPT [ARG...]: one run of SCRIPT on every
# host of the testbed, as users launch it: inside host i, the venv's
# `python -m torch.distributed.run --nnodes HOSTS --nproc-per-node 1
# --node-rank i --master-addr 10.77.0.1 --master-port PORT` (static
# rendezvous; zen's rendezvous goes through the same torch store; each
# worker's stderr also kept by torchrun, --redirects 2 --tee 2). Gloo is
# bound to the testbed interface (GLOO_SOCKET_IFNAME=zentb0), zen to the
# host's address (ZEN_HOSTNAME); OMP_NUM_THREADS=1 so that the ranks share
# the cores fairly; PYTHONPATH=$ZEN_BUILD/python. The allocator is left as
# users get it (no GLIBC_TUNABLES is set; one in the caller's environment is
# passed on). Rank 0's output goes to LOG, host i's to LOG less its .log
# suffix plus .host<i>.log. Waits for every rank; when one failed, prints
# the end of LOG on stderr and returns its status.
zen_testbed_torchrun() {
  local port=$1 log_0=$2 script=$3 rc=0 i p log
  shift 3
  ZEN_TESTBED_PIDS=()
  for ((i = 0; i < ZEN_TESTBED_HOSTS; i++)); do
    log=$log_0
    [ "$i" -eq 0 ] || log="${log_0%.log}.host$i.log"
    ip netns exec "zentb$ZEN_TESTBED_TAG-h$i" env PYTHONPATH="$ZEN_BUILD/python" \
      GLOO_SOCKET_IFNAME=zentb0 ZEN_HOSTNAME="10.77.0.$((i + 1))" OMP_NUM_THREADS=1 \
      PYTHONUNBUFFERED=1 \
      "$ZEN_VENV_PYTHON" -m torch.distributed.run --nnodes "$ZEN_TESTBED_HOSTS" \
      --nproc-per-node 1 --node-rank "$i" --master-addr 10.77.0.1 --master-port "$port" \
      --redirects 2 --tee 2 "$script" "$@" >"$log" 2>&1 &
    ZEN_TESTBED_PIDS+=($!)
  done
  for p in "${ZEN_TESTBED_PIDS[@]}"; do wait "$p" || rc=$?; done
  ZEN_TESTBED_PIDS=()
  [ "$rc" -eq 0 ] || tail -30 "$log_0" >&2
  return "$rc"
}
