#!/bin/bash
# Build one NVIDIA DCGM 4 version (libdcgm.so.4, nv-hostengine, dcgmi, libnvml_injection.so.1 and
# the field-watching modules) from NVIDIA's public source on Debian bookworm x86-64 with g++ 12,
# without any CUDA toolkit, and pack it as a test kit: dcgm-VERSION-nvml-injection-linux-x86_64.tar.xz
# holding dcgm-VERSION/{LICENSE,bin,lib}, stripped (the layout of ../../../shared/dcgm-real's 4.6.0 kit).
#
# The recipe is ../shared/dcgm-real/build.sh's, parameterised by version: the DCGM commit, the pins
# of each version's dcgmbuild urls.txt (plog, tclap, fmt) and the patches under patches/VERSION/
# (the same two patches, their context adapted to each tree).
#
# Usage: build.sh VERSION DCGM_GIT PLOG_GIT TCLAP_GIT FMT_GIT [OUT_DIR]
#   VERSION  4.4.2, 4.5.3 or 4.6.0
#   *_GIT    git dirs or URLs of github NVIDIA/DCGM, SergiusTheBest/plog, mirror/tclap, fmtlib/fmt
#   OUT_DIR  where the .tar.xz goes (default: this directory)
# Env: B=$TMPDIR/dcgm-build-VERSION (work dir), JOBS=2, SKIP_APT=1 to skip apt.
set -euo pipefail
VERSION=${1:?version: 4.4.2, 4.5.3 or 4.6.0}
DCGM_GIT=${2:?git dir of NVIDIA/DCGM}
PLOG_GIT=${3:?git dir of SergiusTheBest/plog}
TCLAP_GIT=${4:?git dir of tclap (mirror/tclap)}
FMT_GIT=${5:?git dir of fmtlib/fmt}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT_DIR=$(mkdir -p "${6:-$HERE}" && cd "${6:-$HERE}" && pwd)
B=${B:-${TMPDIR:-/tmp}/dcgm-build-$VERSION}
JOBS=${JOBS:-2}
PLOG_REF=1.1.10                                        # every version's urls.txt
TCLAP_COMMIT=82abdc943e23b2f91678fb86c436962182ca9a29  # tclap 1.4 branch, every version's urls.txt
case "$VERSION" in
  4.4.2) DCGM_COMMIT=f0ec2156c5c0257e4644d70c853eb1e7bc90994a   # tag v4.4.2 "DCGM 4.4.2"
         FMT_REF=10.2.1 ;;                                     # dcgmbuild/scripts/target/urls.txt
  4.5.3) DCGM_COMMIT=d646460fe8ac5f3b67daf4f27385fe7701187d23   # tag v4.5.3 "DCGM 4.5.3 (#299)"
         FMT_REF=12.0.0 ;;                                     # dcgmbuild/container-images/dcgmbuild/scripts/urls.txt
  4.6.0) DCGM_COMMIT=72fa3feaa67d716a75323a8f47c34ff3ee73f824   # "DCGM 4.6.0 (#306)", the shared 4.6.0 kit's
         FMT_REF=12.0.0 ;;
  *) echo "unknown version $VERSION (4.4.2, 4.5.3, 4.6.0)" >&2; exit 2 ;;
esac
PATCHES="$HERE/patches/$VERSION"
mkdir -p "$B" && cd "$B"
stage() { echo "=== $(date -u +%H:%M:%S) $VERSION: $*"; }

if [ "${SKIP_APT:-0}" != 1 ]; then
  stage apt
  apt-get update
  # boost 1.81 (not the default 1.74): DCGM needs boost::asio::readable_pipe (>= 1.80).
  # libfmt-dev / libtclap-dev must NOT be installed (too old: fmt 9, tclap 1.2.5; dcgmi includes
  # <tclap/...> without a target include dir, so /usr/include/tclap would shadow tclap 1.4).
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    g++ gcc make ninja-build git ccache pkg-config python3 python3-venv binutils xz-utils \
    libboost-filesystem1.81-dev libboost-system1.81-dev libboost-stacktrace1.81-dev \
    libjsoncpp-dev libevent-dev libyaml-cpp-dev
fi

stage "venv: cmake>=4 (bookworm has 3.25) + CUDA headers (nvidia-cuda-runtime-cu12 wheel)"
[ -x "$B/venv/bin/cmake" ] || { python3 -m venv "$B/venv" && "$B/venv/bin/pip" install "cmake>=4.0,<4.5" nvidia-cuda-runtime-cu12; }
export PATH=$B/venv/bin:$PATH
CUDAINC=$(ls -d "$B"/venv/lib/python3*/site-packages/nvidia/cuda_runtime/include | head -1)
test -f "$CUDAINC/cuda.h"

stage "header-only / small deps from git: plog $PLOG_REF, tclap 1.4 ($TCLAP_COMMIT), fmt $FMT_REF"
mkdir -p deps
if [ ! -f deps/plog/lib/cmake/plog/plogConfig.cmake ]; then
  rm -rf deps/plog-src; git clone -q "$PLOG_GIT" deps/plog-src; git -C deps/plog-src checkout -q "$PLOG_REF"
  cmake -S deps/plog-src -B deps/plog-build -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DPLOG_BUILD_SAMPLES=OFF \
    -DCMAKE_INSTALL_PREFIX="$B/deps/plog" >/dev/null
  cmake --install deps/plog-build >/dev/null
fi
if [ ! -f deps/tclap/lib/cmake/TCLAP/TCLAPConfig.cmake ]; then
  rm -rf deps/tclap-src; git clone -q "$TCLAP_GIT" deps/tclap-src; git -C deps/tclap-src checkout -q "$TCLAP_COMMIT"
  cmake -S deps/tclap-src -B deps/tclap-build -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DBUILD_EXAMPLES=OFF \
    -DBUILD_UNITTESTS=OFF -DBUILD_DOC=OFF -DCMAKE_INSTALL_PREFIX="$B/deps/tclap" >/dev/null
  cmake --install deps/tclap-build --component lib >/dev/null
fi
if [ ! -f deps/fmt/lib/libfmt.a ] || [ "$(cat deps/fmt/REF 2>/dev/null)" != "$FMT_REF" ]; then
  rm -rf deps/fmt-src deps/fmt-build deps/fmt
  git clone -q "$FMT_GIT" deps/fmt-src; git -C deps/fmt-src checkout -q "$FMT_REF"
  cmake -S deps/fmt-src -B deps/fmt-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMT_TEST=OFF -DFMT_DOC=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_PREFIX="$B/deps/fmt" >/dev/null
  nice -n 19 ninja -C deps/fmt-build -j"$JOBS" >/dev/null
  cmake --install deps/fmt-build >/dev/null
  echo "$FMT_REF" > deps/fmt/REF
fi

stage "DCGM source $DCGM_COMMIT + patches/$VERSION"
if [ ! -d src/.git ]; then
  git clone -q --no-checkout "$DCGM_GIT" src
  # A prebuilt test binary nothing here needs (and which some mirrors lack): left out of the work tree.
  git -C src sparse-checkout set --no-cone '/*' '!/testing/python3/apps/p2p_bandwidth/p2p_bandwidth'
fi
git -C src checkout -q -f "$DCGM_COMMIT"
git -C src clean -fdq
for p in "$PATCHES"/*.diff; do echo "apply $(basename "$p")"; git -C src apply "$p"; done

stage configure
# CMakeLists.txt includes Catch2's Catch.cmake (for its unit tests, which are not built here):
# a no-op stand-in, so that no Catch2 needs to be installed.
mkdir -p "$B/cmake-stubs"
echo 'function(catch_discover_tests)
endfunction()' > "$B/cmake-stubs/Catch.cmake"
# Flags: -O1 without -g (compile speed on 2 cores; upstream uses -O3 -g), gcc12_compat.h force-included
# (missing transitive std includes with libstdc++ 12), tclap 1.4 headers visible to every target
# (upstream has it in its sysroot), tests off, CUDA headers only, --no-as-needed for executables
# (Debian's gcc passes --as-needed, and 4.4/4.5's dcgmi lists libdcgm before the archives using it).
cmake -S src -B obj -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCGM_RELEASE_DEBUGINFO=OFF \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS=-include $B/src/cmake/gcc12_compat.h" \
  "-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES=$B/deps/tclap/include" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_PREFIX="$B/out" -DBUILD_TESTING=OFF -DCTEST_USE_LAUNCHERS=OFF \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "-DCMAKE_PREFIX_PATH=$B/deps/plog;$B/deps/tclap;$B/deps/fmt" \
  "-DCMAKE_MODULE_PATH=$B/cmake-stubs" "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed" \
  -DLibevent_USE_SHARED_LIBS=ON -DDCGM_CUDA_HEADERS_DIR="$CUDAINC" > "$B/configure.log" 2>&1 || { tail -40 "$B/configure.log"; exit 1; }

stage "build (only what is needed; nvvs/proftester/cublas proxies need real CUDA toolkits and are skipped)"
TARGETS="dcgm nv-hostengine dcgmi nvml_injection dcgmmoduleconfig dcgmmodulehealth dcgmmoduleintrospect \
dcgmmodulepolicy dcgmmodulenvswitch dcgmmodulesysmon"
nice -n 19 ninja -C obj -j"$JOBS" $TARGETS > "$B/build.log" 2>&1 || { grep -E 'error|FAILED' "$B/build.log" | head -20; echo "BUILD FAILED (see $B/build.log)"; exit 1; }
grep -E '^\[[0-9]+/' "$B/build.log" | tail -1

stage "install into $B/out (manual copy: 'ninja install' would build every target, including CUDA ones)"
rm -rf "$B/out"; mkdir -p "$B/out/bin" "$B/out/lib" "$B/out/include"
cp -a obj/nv-hostengine obj/dcgmi/dcgmi "$B/out/bin/"
cp -a obj/libdcgm.so* obj/libnvml_injection.so* obj/libdcgmmodule*.so* "$B/out/lib/"
cp -a src/dcgmlib/*.h "$B/out/include/"   # public API headers (dcgm_agent.h, dcgm_structs.h, dcgm_fields.h, ...)
# CMAKE_BUILD_WITH_INSTALL_RPATH=ON: build-tree binaries already carry RUNPATH $ORIGIN:$ORIGIN/../lib
readelf -d "$B/out/bin/nv-hostengine" | grep -i runpath

stage "pack dcgm-$VERSION (stripped; LICENSE; no headers) into $OUT_DIR"
rm -rf "$B/pack"; mkdir -p "$B/pack/dcgm-$VERSION"
cp -a "$B/out/bin" "$B/out/lib" "$B/pack/dcgm-$VERSION/"
cp src/LICENSE "$B/pack/dcgm-$VERSION/LICENSE"
find "$B/pack/dcgm-$VERSION" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec strip --strip-unneeded {} +
TARBALL="$OUT_DIR/dcgm-$VERSION-nvml-injection-linux-x86_64.tar.xz"
tar -C "$B/pack" --owner=0 --group=0 --numeric-owner --sort=name -cJf "$TARBALL" "dcgm-$VERSION"
stage done
ls -la "$B/out/bin" "$B/out/lib" "$TARBALL"
