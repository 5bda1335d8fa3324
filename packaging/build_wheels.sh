#!/usr/bin/env bash
# The sdist and the manylinux2014 wheels, without a container.
#
#   packaging/build_wheels.sh build   the sdist into dist/, then one wheel per Python built
#                                     from it with zig cc for glibc 2.17, repaired by auditwheel
#   packaging/build_wheels.sh check   each wheel's platform tag, and each wheel (and the sdist,
#                                     built by pip with the system compiler) installed in a
#                                     fresh venv and run through packaging/smoke.py
#
# Called by `make wheel` and `make wheel-check`, which create the tools venv
# (packaging/requirements-wheel.txt). Settings, from the environment:
#   TOOLS    the tools venv (.venv-tools)        PYTHONS  versions to build (3.10 3.11 3.12 3.13)
#   DIST     where results go (dist)             PYTHON   the interpreter of the sdist check (python3)
#   SUITE_PYTHONS  versions whose wheel check also runs the test suite (none)
# Scratch space is build-wheel/, removed on exit; the sources' own build/
# folders are never used: every build runs in an unpacked copy of the sdist.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

mode=${1:-}
TOOLS=$(cd "${TOOLS:-.venv-tools}" 2>/dev/null && pwd) || { echo "build_wheels: no tools venv (make wheel creates it)" >&2; exit 1; }
PYTHONS=${PYTHONS:-3.10 3.11 3.12 3.13}
DIST=${DIST:-dist}
GLIBC=2.17 # the oldest glibc of the systems CANN supports (CentOS 7)
ARCH=$(uname -m)
case $ARCH in
  x86_64 | aarch64) ;;
  *) echo "build_wheels: no manylinux2014 wheels for $ARCH here" >&2; exit 1 ;;
esac
PLAT=manylinux2014_$ARCH
WORK=$ROOT/build-wheel
export PATH=$TOOLS/bin:$PATH # auditwheel finds patchelf there
# zig's caches (the glibc 2.17 stubs it builds once) stay with the tools.
export ZIG_GLOBAL_CACHE_DIR=$TOOLS/zig-cache ZIG_LOCAL_CACHE_DIR=$TOOLS/zig-cache
export PIP_DISABLE_PIP_VERSION_CHECK=1

# The interpreter of Python $1, as make test-matrix finds it: pyenv, then PATH.
find_python() {
  local py
  py=$(ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python 2>/dev/null | tail -1)
  [ -n "$py" ] || py=$(command -v "python$1" || true)
  echo "$py"
}

the_sdist() {
  local s
  s=$(ls "$DIST"/ascend_ipc-*.tar.gz 2>/dev/null || true)
  if [ "$(echo "$s" | grep -c .)" != 1 ]; then
    echo "build_wheels: expected one sdist in $DIST/, found: ${s:-none} (make wheel)" >&2
    exit 1
  fi
  echo "$(cd "$(dirname "$s")" && pwd)/$(basename "$s")"
}

rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

build() {
  mkdir -p "$DIST"
  rm -f "$DIST"/ascend_ipc-*.tar.gz "$DIST"/ascend_ipc-*.whl
  echo "== sdist"
  "$TOOLS/bin/python" -m build --sdist --outdir "$DIST" .
  local sdist
  sdist=$(the_sdist)

  # setuptools takes CC and LDSHARED from the environment; LDSHARED set too,
  # so no flags of the interpreter's own link line (its rpath) come along.
  cat >"$WORK/zigcc" <<EOF
#!/bin/sh
exec "$TOOLS/bin/python" -m ziglang cc -target $ARCH-linux-gnu.$GLIBC "\$@"
EOF
  chmod +x "$WORK/zigcc"

  local v py built=0
  for v in $PYTHONS; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
      echo "== Python $v: not installed here, skipped"
      continue
    fi
    echo "== Python $v ($py): wheel"
    mkdir -p "$WORK/src-$v" "$WORK/raw-$v"
    tar -xzf "$sdist" -C "$WORK/src-$v"
    # pip builds it in an isolated environment (setuptools and numpy from
    # pyproject.toml's build requirements), with zig's compiler and glibc.
    CC="$WORK/zigcc" LDSHARED="$WORK/zigcc -shared" \
      "$py" -m pip wheel -q --no-deps --wheel-dir "$WORK/raw-$v" "$WORK/src-$v"/ascend_ipc-*/
    auditwheel repair --plat "$PLAT" --wheel-dir "$DIST" "$WORK/raw-$v"/ascend_ipc-*.whl
    built=$((built + 1))
  done
  [ "$built" -gt 0 ] || { echo "build_wheels: no Python of $PYTHONS found" >&2; exit 1; }
  ls -l "$DIST"
}

# Installs $2 (a wheel or the sdist) into a fresh venv ($3) of interpreter $1
# and runs the smoke test there, from the scratch folder (not the source tree).
# For a version in SUITE_PYTHONS the whole test suite follows in the same venv,
# run from tests/ so that the package it imports is the installed wheel: the
# version matrix tests what users install, with one install per Python.
smoke() {
  local py=$1 what=$2 venv=$WORK/venv-$3
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$what"
  (cd "$WORK" && "$venv/bin/python" "$ROOT/packaging/smoke.py")
  if [[ " ${SUITE_PYTHONS:-} " == *" $3 "* ]]; then
    echo "== Python $3: the test suite against the installed wheel"
    "$venv/bin/python" -m pip install -q pytest hypothesis
    (cd "$ROOT/tests" && "$venv/bin/python" -m pytest -q -p no:cacheprovider python)
  fi
  rm -rf "$venv"
}

check() {
  local sdist v py tag whl show checked=0
  sdist=$(the_sdist)
  for v in $PYTHONS; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
      echo "== Python $v: not installed here, skipped"
      continue
    fi
    tag=cp${v/./}
    whl=$(ls "$DIST"/ascend_ipc-*-"$tag"-"$tag"-*"$PLAT"*.whl 2>/dev/null || true)
    if [ "$(echo "$whl" | grep -c .)" != 1 ]; then
      echo "build_wheels: expected one $PLAT wheel for Python $v in $DIST/, found: ${whl:-none} (make wheel)" >&2
      exit 1
    fi
    echo "== Python $v: $(basename "$whl")"
    show=$(auditwheel show "$whl")
    echo "$show"
    # manylinux2014 is manylinux_2_17: the tag auditwheel must find the file consistent with.
    if ! echo "$show" | tr -s ' \n' ' ' | grep -q "consistent with the following platform tag: \"manylinux_2_17_$ARCH\""; then
      echo "build_wheels: $(basename "$whl") is not manylinux2014 (manylinux_2_17_$ARCH)" >&2
      exit 1
    fi
    smoke "$py" "$whl" "$v"
    checked=$((checked + 1))
  done
  [ "$checked" -gt 0 ] || { echo "build_wheels: no Python of $PYTHONS found" >&2; exit 1; }
  echo "== sdist with pip and the system compiler ($(basename "$sdist"))"
  smoke "${PYTHON:-python3}" "$sdist" sdist
}

case $mode in
  build) build ;;
  check) check ;;
  *) echo "usage: packaging/build_wheels.sh build|check" >&2; exit 2 ;;
esac
