# scripts/lib.sh — shared steps of scripts/demo and scripts/test: install the
# Debian packages zen needs (only the missing ones), then configure and build
# Release into build/. Sourced, not run.
set -euo pipefail

ZEN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZEN_BUILD=${ZEN_BUILD:-$ZEN_ROOT/build}

# Everything zen needs, from Debian.
ZEN_PACKAGES=(
  cmake g++ make pkg-config
  libgloo-dev libhiredis-dev redis-server nlohmann-json3-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest
  python3-torch python3-sentencepiece python3-matplotlib dict-gcide
  iproute2 clang libclang-rt-14-dev libopenmpi-dev openmpi-bin
)

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\nerror: %s\n' "$*" >&2; exit 1; }

zen_install_packages() {
  say "checking Debian packages"
  local missing=()
  for p in "${ZEN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "all ${#ZEN_PACKAGES[@]} packages present"
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

zen_build() {
  say "configuring Release build in $ZEN_BUILD"
  mkdir -p "$ZEN_BUILD"
  cmake -S "$ZEN_ROOT" -B "$ZEN_BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >"$ZEN_BUILD/configure.log" 2>&1 \
    || { cat "$ZEN_BUILD/configure.log"; die "cmake configure failed (log above)"; }
  say "building ($(nproc) jobs)"
  cmake --build "$ZEN_BUILD" -j"$(nproc)" || die "build failed (see the compiler output above)"
}
