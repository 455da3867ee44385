#!/usr/bin/env bash
# Configures and builds the CUDA variant on a GPU host without package access, against the host's
# CUDA PyTorch (LibTorch + NCCL from its wheels) and the Debian 12 bundle made by
# scripts/gpu-bundle.sh. Applies GPU.md's pitfall fixes:
#   1. fmt 12 headers in Torch's include dir: -DDITSERVE_DEPS_PREFIX puts the bundle's include dir
#      first (cmake/Dependencies.cmake), and the bundle comes first in CMAKE_PREFIX_PATH.
#   2. no protobuf CMake package: FindProtobuf (module mode) gets Protobuf_* paths into the bundle.
#   3. gRPC's config pulls re2 through pkg-config: PKG_CONFIG_SYSROOT_DIR/LIBDIR point pkg-config at
#      the bundle, and LIBRARY_PATH lets the linker find -lre2 anyway.
#   4. the bundle's protoc/grpc_cpp_plugin need its libraries: called through wrappers that set
#      LD_LIBRARY_PATH, so a later plain `cmake --build` works too.
#   5. the binaries get a build RPATH to the bundle, NCCL and torch, as DT_RPATH (--disable-new-dtags):
#      a DT_RUNPATH would not apply to the bundle libraries' own dependencies (libgrpc++ -> libabsl_*),
#      so they would not start without LD_LIBRARY_PATH.
# Also used by the Dockerfile's CUDA build stage (scripts/docker-build-steps.sh).
#
# Usage: scripts/gpu-build.sh --bundle DIR [--build-dir DIR] [--python PY] [--jobs N]
#                             [--cuda-arch LIST] [--configure-only] [--test] [--cpu]
#                             [--torch-prefix DIR] [--nccl-root DIR] [--target T]...
#                             [-- extra cmake args]
#   --bundle DIR        the extracted ditserve-gpu-deps folder (required)
#   --build-dir DIR     default: build-cuda in the repository
#   --python PY         the interpreter of the CUDA PyTorch environment (default python3)
#   --cuda-arch LIST    CUDA architectures, as TORCH_CUDA_ARCH_LIST (default 90: H100/H200)
#   --test              run `ctest -L gpu` after the build
#   --cpu               DITSERVE_CUDA=OFF (checks the bundle plumbing on a machine without CUDA)
#   --torch-prefix DIR  Torch's CMake prefix instead of asking python (e.g. /usr for Debian's)
#   --nccl-root DIR     NCCL root (include/, lib/) instead of asking python for nvidia.nccl
#   --target T          build only target T (repeatable; default: everything)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

bundle="" build="$repo/build-cuda" py=python3 jobs=$(nproc) arch=90
configure_only=0 run_tests=0 cuda=ON torch_prefix="" nccl_root="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift ;;
    --build-dir) build="$2"; shift ;;
    --python) py="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --cuda-arch) arch="$2"; shift ;;
    --configure-only) configure_only=1 ;;
    --test) run_tests=1 ;;
    --cpu) cuda=OFF ;;
    --torch-prefix) torch_prefix="$2"; shift ;;
    --nccl-root) nccl_root="$2"; shift ;;
    --target) targets+=(--target "$2"); shift ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu-build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
extra_args=("$@")
die() { echo "gpu-build: $*" >&2; exit 1; }

[ -n "$bundle" ] || die "--bundle DIR is required (make it with scripts/gpu-bundle.sh)"
B=$(cd "$bundle" && pwd)
LIB="$B/usr/lib/x86_64-linux-gnu"
[ -f "$B/BUNDLE-MANIFEST.txt" ] && [ -x "$B/usr/bin/protoc" ] || die "$B is not a gpu-bundle.sh folder"

if [ -z "$torch_prefix" ]; then
  torch_prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)') \
    || die "$py cannot import torch (use --python or --torch-prefix)"
  abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  # Debian's gRPC/protobuf/absl use the C++11 ABI; a pre-cxx11 torch cannot link with them.
  [ "$abi" = 1 ] || die "this PyTorch uses the pre-C++11 ABI; Debian's libraries need the C++11 ABI"
  echo "gpu-build: torch $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
fi
torch_lib=""
for d in "$torch_prefix/../../lib" "$torch_prefix/../lib"; do
  [ -d "$d" ] && [ -e "$d/libc10.so" ] && { torch_lib=$(cd "$d" && pwd); break; }
done

cuda_args=()
if [ "$cuda" = ON ]; then
  if [ -z "$nccl_root" ]; then
    nccl_root=$("$py" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])') \
      || die "no nvidia.nccl in $py's environment (use --nccl-root)"
  fi
  [ -f "$nccl_root/include/nccl.h" ] || die "no nccl.h under $nccl_root/include"
  nccl_lib="$nccl_root/lib/libnccl.so.2"
  [ -f "$nccl_lib" ] || die "no libnccl.so.2 under $nccl_root/lib"
  nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  [ -x "$nvcc" ] || die "nvcc not found (set CUDA_HOME or PATH)"
  # NCCL paths given outright: the GPU host also has a system libnccl.so in /usr/lib, which a name
  # search for "nccl" finds before the wheel's libnccl.so.2 (headers and library must match).
  cuda_args=(-DNCCL_ROOT="$nccl_root" -DNCCL_INCLUDE_DIR="$nccl_root/include" -DNCCL_LIBRARY="$nccl_lib"
             -DCMAKE_CUDA_COMPILER="$nvcc" -DDITSERVE_CUDA_ARCH="${arch//,/;}")
  # Torch's CUDA flags follow TORCH_CUDA_ARCH_LIST (90 -> 9.0); it warns about and ignores
  # CMAKE_CUDA_ARCHITECTURES. Our kernels (models/cuda) take DITSERVE_CUDA_ARCH instead.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$(echo "$arch" | sed -E 's/([0-9]+)([0-9])/\1.\2/g; s/[;,]/ /g')}"
fi

# Environment for configure, build and tests. Bundle first: the host may carry other copies.
export PATH="$B/usr/bin:$PATH"
export LD_LIBRARY_PATH="$LIB:$B/usr/lib${nccl_root:+:$nccl_root/lib}${torch_lib:+:$torch_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$LIB:$B/usr/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$LIB/pkgconfig:$B/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$B"
export PKG_CONFIG_PATH=""

# protoc and grpc_cpp_plugin run at build time; wrappers carry their library path so that a later
# `cmake --build` from a plain shell works too.
mkdir -p "$build/bundle-tools"
for tool in protoc grpc_cpp_plugin; do
  cat > "$build/bundle-tools/$tool" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$B/usr/bin/$tool" "\$@"
EOF
  chmod +x "$build/bundle-tools/$tool"
done
cat > "$build/ditserve-env.sh" <<EOF
# source this to run the binaries and ctest from a new shell
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH"
EOF

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

cmake -S "$repo" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DDITSERVE_CUDA="$cuda" \
  -DCMAKE_PREFIX_PATH="$B/usr;$torch_prefix" \
  -DDITSERVE_DEPS_PREFIX="$B" \
  -Dfmt_DIR="$LIB/cmake/fmt" -Dspdlog_DIR="$LIB/cmake/spdlog" \
  -DProtobuf_INCLUDE_DIR="$B/usr/include" \
  -DProtobuf_LIBRARY="$LIB/libprotobuf.so" \
  -DProtobuf_LITE_LIBRARY="$LIB/libprotobuf-lite.so" \
  -DProtobuf_PROTOC_LIBRARY="$LIB/libprotoc.so" \
  -DProtobuf_PROTOC_EXECUTABLE="$build/bundle-tools/protoc" \
  -DGRPC_CPP_PLUGIN="$build/bundle-tools/grpc_cpp_plugin" \
  -DPKG_CONFIG_EXECUTABLE="$B/usr/bin/pkgconf" \
  -DHTTPLIB_INCLUDE_DIR="$B/usr/include" \
  -DCMAKE_BUILD_RPATH="$LIB;$B/usr/lib${nccl_root:+;$nccl_root/lib}${torch_lib:+;$torch_lib}" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  "${cuda_args[@]}" "${extra_args[@]}"

[ "$configure_only" = 1 ] && { echo "gpu-build: configured $build"; exit 0; }
cmake --build "$build" -j "$jobs" "${targets[@]}"
echo "gpu-build: built $build (source $build/ditserve-env.sh before running binaries by hand)"
if [ "$run_tests" = 1 ]; then
  (cd "$build" && ctest -L gpu --output-on-failure)
fi
