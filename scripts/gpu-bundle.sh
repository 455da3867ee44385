#!/usr/bin/env bash
# Builds the offline dependency bundle for the CUDA variant: Debian 12's gRPC, Protobuf, Abseil,
# spdlog/fmt, re2, c-ares, OpenSSL, sentencepiece, libpng, cpp-httplib, nlohmann-json, GoogleTest,
# Gloo (+ their library dependencies) extracted with `dpkg-deb -x` into one folder, static archives
# and docs dropped, packed as .tar.xz. LibTorch is NOT included: the GPU host (or the CUDA image)
# brings its own CUDA PyTorch, and NCCL comes from that PyTorch's nvidia/nccl (see GPU.md).
#
# Runs on any Debian 12 machine with apt (no root needed: apt-get download + dpkg-deb -x).
# Usage: scripts/gpu-bundle.sh [--out DIR] [--list] [--no-tar]
#   --out DIR   work/output folder (default /tmp/ditserve-gpu-bundle); produces
#               DIR/ditserve-gpu-deps/ (the bundle root) and DIR/ditserve-gpu-deps.tar.xz
#   --list      print the resolved package list and exit
#   --no-tar    leave the folder, skip the archive
# On the GPU host: tar xf ditserve-gpu-deps.tar.xz && scripts/gpu-build.sh --bundle ditserve-gpu-deps
# (xz, not gzip: 25 MB against 38.5, and a device call carries 64 MiB with the working tree)
set -euo pipefail

out=/tmp/ditserve-gpu-bundle
list_only=0
make_tar=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift ;;
    --list) list_only=1 ;;
    --no-tar) make_tar=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# What the CUDA build links or runs: GPU.md's list, ninja and pkgconf (the host may lack them), and
# every -dev package of scripts/deps.txt except LibTorch (the host's PyTorch replaces it) and
# clang's runtime (fuzzing only), so a library added to deps.txt reaches the bundle too. Their
# dependency closure is added below.
SEED=(
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotoc32 protobuf-compiler
  libabsl-dev libabsl20220623
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libc-ares2 libc-ares-dev libre2-9 libre2-dev libssl-dev libssl3 zlib1g-dev zlib1g
  ninja-build pkgconf
)
deps_txt="$(dirname "$0")/deps.txt"
mapfile -t -O "${#SEED[@]}" SEED < <(grep -v '^\s*#' "$deps_txt" | grep -E -- '-dev\s*$' \
  | grep -Ev '^(libtorch-dev|libclang-rt-.*)\s*$' | tr -d ' \t')
# Base system, toolchain and packaging machinery: present on any Ubuntu 24.04 host with g++, and
# bundling them would shadow the host's newer copies (glibc 2.39, libstdc++ 13).
EXCLUDE_RE='^(<.*>|adduser|cdebconf|debconf|dpkg|tar|passwd|install-info|readline-common|rpcsvc-proto|gcc-[0-9]+-base|libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc.*|libacl1|libaudit.*|libbz2-1\.0|libcap-ng0|libcom-err2|libdb5\.3|libdebian-installer4|libgssapi-krb5-2|libk5crypto3|libkeyutils1|libkrb5.*|liblzma5|libmd0|libnewt0\.52|libpam.*|libreadline8|libselinux1|libsemanage.*|libsepol2|libslang2|libtextwrap1|libtinfo6|libzstd1|googletest|catch2)$'

mapfile -t PKGS < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${SEED[@]}" \
  | grep -v '^ ' | sort -u | grep -Ev "$EXCLUDE_RE")
if [ "$list_only" = 1 ]; then printf '%s\n' "${PKGS[@]}"; exit 0; fi

root="$out/ditserve-gpu-deps"
debs="$out/debs"
rm -rf "${root:?}" "${debs:?}"
mkdir -p "$root" "$debs"
echo "gpu-bundle: downloading ${#PKGS[@]} packages into $debs"
# apt-get download writes into the current directory; as root it warns that _apt cannot write there.
(cd "$debs" && apt-get download -q "${PKGS[@]}" 2>&1 | grep -v 'unsandboxed' || true)
n_debs=$(find "$debs" -name '*.deb' | wc -l)
if [ "$n_debs" -ne "${#PKGS[@]}" ]; then
  echo "gpu-bundle: expected ${#PKGS[@]} .deb files, got $n_debs" >&2; exit 1
fi

manifest="$root/BUNDLE-MANIFEST.txt"
{
  echo "# ditserve GPU dependency bundle: Debian 12 packages extracted with dpkg-deb -x"
  echo "# built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
} > "$manifest"
for d in "$debs"/*.deb; do
  dpkg-deb -x "$d" "$root"
  dpkg-deb -W --showformat='${Package} ${Version}\n' "$d" >> "$manifest"
done

# Merge /lib into /usr/lib (some Debian 12 packages still ship there), so one lib dir suffices.
if [ -d "$root/lib" ]; then
  cp -a "$root/lib/." "$root/usr/lib/"
  rm -rf "${root:?}/lib"
fi
# Static archives, docs, man pages and sources are not needed to build or run (GPU.md: ~37 MB
# left). GoogleTest and GoogleMock are kept: Debian 12 ships them as static archives only.
find "$root" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/bug" \
       "$root/usr/src"

# Absolute symlinks (zlib1g-dev's libz.so -> /lib/...) would point at the host's files: make them
# relative links into the bundle, and fail loudly if the target is not bundled.
bad=0
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  case "$target" in /*) ;; *) continue ;; esac
  inside="$root${target/#\/lib\//\/usr\/lib\/}"
  if [ ! -e "$inside" ]; then
    echo "gpu-bundle: $link -> $target is not in the bundle" >&2; bad=1; continue
  fi
  ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$inside")" "$link"
done < <(find "$root" -type l -print0)
[ "$bad" = 0 ] || exit 1
# Every remaining link must resolve inside the bundle.
if find "$root" -xtype l | grep -q .; then
  echo "gpu-bundle: dangling links:" >&2; find "$root" -xtype l >&2; exit 1
fi

# Sanity: the pieces the CUDA build looks for by path (gpu-build.sh) are present.
lib="$root/usr/lib/x86_64-linux-gnu"
for f in usr/bin/protoc usr/bin/grpc_cpp_plugin usr/bin/ninja usr/bin/pkgconf \
         usr/include/google/protobuf/message.h usr/include/grpcpp/grpcpp.h usr/include/spdlog/spdlog.h \
         usr/include/httplib.h usr/include/nlohmann/json.hpp usr/include/png.h \
         usr/lib/x86_64-linux-gnu/libprotobuf.so usr/lib/x86_64-linux-gnu/libre2.so \
         usr/lib/x86_64-linux-gnu/cmake/grpc/gRPCConfig.cmake usr/lib/x86_64-linux-gnu/cmake/absl/abslConfig.cmake \
         usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake usr/lib/x86_64-linux-gnu/pkgconfig/sentencepiece.pc; do
  [ -e "$root/$f" ] || { echo "gpu-bundle: missing $f" >&2; exit 1; }
done
# The Debian binaries must run from the bundle alone (plus the host's glibc/libstdc++).
LD_LIBRARY_PATH="$lib" "$root/usr/bin/protoc" --version >/dev/null
LD_LIBRARY_PATH="$lib" ldd "$root/usr/bin/grpc_cpp_plugin" | grep -q 'not found' \
  && { echo "gpu-bundle: grpc_cpp_plugin has unresolved libraries" >&2; exit 1; }

echo "gpu-bundle: $(du -sh "$root" | cut -f1) in $root ($(grep -vc '^#' "$manifest") packages)"
if [ "$make_tar" = 1 ]; then
  tar -C "$out" -cf - ditserve-gpu-deps | xz -T0 -9 > "$out/ditserve-gpu-deps.tar.xz"
  echo "gpu-bundle: $(du -h "$out/ditserve-gpu-deps.tar.xz" | cut -f1) archive $out/ditserve-gpu-deps.tar.xz"
fi
rm -rf "$debs"
