#!/usr/bin/env bash
# The C++ package as a user meets it: `cmake --install` of this build into a
# prefix, examples/cpp_consumer configured with find_package(meshtrain)
# against it, built and run (an allreduce over 2 processes and a model built
# through the installed headers and libraries); the installed CLI runs; and
# `cpack -G DEB` makes a .deb holding the CLI, the headers and the package
# files, with its dependencies declared.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
build=$(cd "$(dirname "$BIN")/.." && pwd)
prefix=$TMP/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
[ -x "$prefix/bin/meshtrain" ] || fail "no bin/meshtrain installed"
"$prefix/bin/meshtrain" --version >/dev/null || fail "the installed CLI does not run"
[ -f "$prefix/lib/cmake/meshtrain/meshtrainConfig.cmake" ] || fail "no meshtrainConfig.cmake"
[ -f "$prefix/include/meshtrain/comm/communicator.h" ] || fail "headers not installed"
if find "$prefix/include" -name '*.cpp' | grep . >/dev/null; then fail "sources installed as headers"; fi

cmake -S "$SRC/examples/cpp_consumer" -B "$TMP/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log"; fail "consumer configure"; }
cmake --build "$TMP/consumer" -j2 >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "consumer build"; }
out=$("$TMP/consumer/consumer") || fail "consumer exited non-zero: $out"
echo "$out"
grep "^consumer: ok" <<<"$out" >/dev/null || fail "consumer did not report ok"

(cd "$build" && cpack -G DEB -B "$TMP/deb" >"$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; fail "cpack"; }
deb=$(ls "$TMP"/deb/meshtrain_*.deb)
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/meshtrain ./usr/include/meshtrain/comm/communicator.h \
         ./usr/lib/cmake/meshtrain/meshtrainConfig.cmake ./usr/lib/cmake/meshtrain/meshtrainTargets.cmake; do
  grep -F " $f" <<<"$contents" >/dev/null || fail "$deb lacks $f"
done
depends=$(dpkg-deb -f "$deb" Depends)
grep "libfmt-dev" <<<"$depends" >/dev/null || fail "the .deb declares no dependencies: $depends"
echo "package_consumer: installed package builds a consumer; $(basename "$deb") ($(du -h "$deb" | cut -f1))"
