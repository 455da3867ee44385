#!/usr/bin/env bash
# The steps of the container build, one place. The Dockerfile's RUN lines call only this script
# (tests/integration/deploy_checks.sh enforces that), so the image, CI and a person at a shell run
# the same commands and cannot drift apart.
#
# Usage: scripts/docker-build-steps.sh [--dry-run] STEP VARIANT [options]
#   STEP     bundle | deps | build | stage | runtime | all   (all = deps build stage runtime)
#   VARIANT  cuda | cpu
#   --dry-run       print the commands instead of running them; apt package names are still checked
#                   against `apt-cache policy` (Debian 12 names only: the cpu variant and the bundle)
#   --src DIR       source tree (default: this script's repository)
#   --build-dir DIR (default: SRC/build)
#   --prefix DIR    staged install tree, copied whole into the runtime image (default /opt/ditserve)
#   --bundle DIR    extracted gpu-bundle.sh folder (default /opt/ditserve-gpu-deps)
#   --venv DIR      CUDA PyTorch virtual environment (default /opt/torch-venv)
#
# Steps (the Dockerfile stage that runs each is in brackets):
#   bundle  [bundle, debian:12]        scripts/gpu-bundle.sh into BUNDLE (Debian 12 gRPC & co.)
#   deps    [build-cpu, debian:12]     apt-get install scripts/deps.txt
#           [build-cuda, nvidia/cuda]  apt-get install the toolchain, pip install CUDA PyTorch
#                                      (TORCH_VERSION, TORCH_INDEX_URL) into VENV; NCCL comes with it
#   build   cpu: scripts/setup.sh --no-apt (the same build CI and developers run)
#           cuda: scripts/gpu-build.sh --bundle BUNDLE (the same build as the offline GPU host)
#   stage   binaries -> PREFIX/bin, the generated tiny model -> PREFIX/models/tiny; cpu: the Debian
#           packages the binaries need -> PREFIX/share/runtime-packages.txt; cuda: the bundle's and
#           the wheel's shared libraries -> PREFIX/lib, PREFIX/py/{torch/lib,nvidia}
#   runtime [runtime-*]               install the runtime packages (cpu), add the non-root user
#                                      ditserve (uid 10001), check every binary's libraries resolve
set -euo pipefail

dry=0
src=$(cd "$(dirname "$0")/.." && pwd)
build="" prefix=/opt/ditserve bundle=/opt/ditserve-gpu-deps venv=/opt/torch-venv
: "${TORCH_VERSION:=2.11.0}"
: "${TORCH_INDEX_URL:=https://download.pytorch.org/whl/cu130}"
# ditserve-spm-train: the SentencePiece trainer make-tiny-model runs as a separate process (it looks
# for it next to ditserve-tool).
BINARIES=(ditserve-frontend ditserve-worker ditserve-cli ditserve-tool ditserve-spm-train)
RUNTIME_UID=10001

args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --src) src=$(cd "$2" && pwd); shift ;;
    --build-dir) build="$2"; shift ;;
    --prefix) prefix="$2"; shift ;;
    --bundle) bundle="$2"; shift ;;
    --venv) venv="$2"; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "docker-build-steps.sh: unknown option $1" >&2; exit 2 ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ ${#args[@]} -eq 2 ] || { echo "usage: docker-build-steps.sh [--dry-run] STEP VARIANT [options]" >&2; exit 2; }
step=${args[0]} variant=${args[1]}
case "$variant" in cuda|cpu) ;; *) echo "docker-build-steps.sh: VARIANT must be cuda or cpu" >&2; exit 2 ;; esac
[ -n "$build" ] || build="$src/build"
jobs=$(nproc)

log() { echo "docker-build-steps [$step/$variant]: $*"; }
# run CMD...: executes, or prints it in --dry-run mode.
run() {
  if [ "$dry" = 1 ]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}
die() { echo "docker-build-steps [$step/$variant]: $*" >&2; exit 1; }

# Fails unless every named package has an installation candidate in this machine's apt sources
# (one apt-cache call: each one loads the whole cache). Unknown names are absent from its output.
check_candidates() {
  local ok missing=() p
  ok=$(apt-cache policy "$@" 2>/dev/null | awk '
    /^[^ ].*:$/ { pkg = substr($0, 1, length($0) - 1) }
    /^  Candidate:/ { if ($2 != "(none)") print pkg }')
  for p in "$@"; do
    grep -qxF -- "$p" <<< "$ok" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] || die "no apt candidate for: ${missing[*]}"
  log "apt-cache policy: all $# packages have a candidate"
}

apt_install() {
  if [ "$dry" = 1 ]; then check_candidates "$@"; fi
  run apt-get update -q
  run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
  run sh -c 'rm -rf /var/lib/apt/lists/*'
}

deps_txt() { grep -v '^\s*#' "$src/scripts/deps.txt" | grep -v '^\s*$'; }

step_bundle() {
  [ "$variant" = cuda ] || die "the bundle is only used by the cuda variant"
  if [ "$dry" = 1 ]; then
    mapfile -t pkgs < <("$src/scripts/gpu-bundle.sh" --list)
    check_candidates "${pkgs[@]}"
  fi
  local work
  work=$(dirname "$bundle")/.bundle-work
  run apt-get update -q
  run "$src/scripts/gpu-bundle.sh" --out "$work" --no-tar
  run mv "$work/ditserve-gpu-deps" "$bundle"
  run rm -rf "$work"
  run sh -c 'rm -rf /var/lib/apt/lists/*'
}

step_deps() {
  if [ "$variant" = cpu ]; then
    mapfile -t pkgs < <(deps_txt)
    apt_install "${pkgs[@]}"
  else
    # Ubuntu 24.04 (nvidia/cuda devel image): only the toolchain; gRPC & co. come from the bundle,
    # ninja and pkgconf too. Names are Ubuntu's, so --dry-run on Debian cannot check them.
    [ "$dry" = 1 ] && log "Ubuntu package names not checked here"
    run apt-get update -q
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      build-essential cmake python3 python3-venv ca-certificates
    run sh -c 'rm -rf /var/lib/apt/lists/*'
    run python3 -m venv "$venv"
    # The cu130 wheel pulls nvidia-nccl (site-packages/nvidia/nccl) and the CUDA runtime libraries.
    run "$venv/bin/pip" install --no-cache-dir "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
  fi
}

step_build() {
  if [ "$variant" = cpu ]; then
    [ "$build" = "$src/build" ] || die "the cpu build is scripts/setup.sh, which builds into SRC/build"
    run "$src/scripts/setup.sh" --no-apt --jobs "$jobs"
  else
    # No GPU during an image build: the tests run on the GPU host (scripts/gpu-build.sh --test).
    run "$src/scripts/gpu-build.sh" --bundle "$bundle" --build-dir "$build" \
      --python "$venv/bin/python" --jobs "$jobs" -- -DDITSERVE_TESTS=OFF
  fi
}

find_binary() {
  find "$build" -maxdepth 3 -type f -name "$1" -perm -u+x -print -quit
}

# Prints "PACKAGE" for each shared library path given, in one dpkg-query call (each call reads the
# whole file database). Debian 12 merges /lib into /usr/lib but dpkg records one of the two, so
# both spellings (and the resolved path) are asked for. Fails naming any library no package owns.
owners_of() {
  local lib alt paths=() db
  for lib in "$@"; do
    case "$lib" in /usr/lib/*) alt=${lib#/usr} ;; /lib/*) alt=/usr$lib ;; *) alt=$lib ;; esac
    paths+=("$lib" "$alt" "$(realpath "$lib")")
  done
  db=$(dpkg-query -S "${paths[@]}" 2>/dev/null || true)   # "pkg:arch: /path" for the known ones
  local unowned=0 pkg
  for lib in "$@"; do
    case "$lib" in /usr/lib/*) alt=${lib#/usr} ;; /lib/*) alt=/usr$lib ;; *) alt=$lib ;; esac
    pkg=$(awk -v a="$lib" -v b="$alt" -v c="$(realpath "$lib")" -F': ' \
            '$2 == a || $2 == b || $2 == c { sub(/:.*/, "", $1); print $1; exit }' <<< "$db")
    if [ -z "$pkg" ]; then echo "no Debian package owns $lib" >&2; unowned=1; else echo "$pkg"; fi
  done
  return "$unowned"
}

step_stage() {
  run mkdir -p "$prefix/bin" "$prefix/share" "$prefix/models"
  local b path
  for b in "${BINARIES[@]}"; do
    path=$(find_binary "$b")
    if [ -z "$path" ]; then
      [ "$dry" = 1 ] && path="$build/<dir>/$b" || die "$b not found under $build"
    fi
    run install -m 0755 "$path" "$prefix/bin/$b"
  done
  # The tiny model the project generates itself: lets the image serve something with no volume.
  run "$prefix/bin/ditserve-tool" make-tiny-model "$prefix/models/tiny"

  if [ "$variant" = cpu ]; then
    [ "$dry" = 1 ] && { log "would write the owning packages of ldd's libraries to $prefix/share/runtime-packages.txt"; return 0; }
    local libs
    mapfile -t libs < <(for b in "${BINARIES[@]}"; do ldd "$prefix/bin/$b"; done \
      | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
    owners_of "${libs[@]}" | sort -u > "$prefix/share/runtime-packages.txt" \
      || die "libraries outside Debian's packages cannot be installed in the runtime image"
    log "$(wc -l < "$prefix/share/runtime-packages.txt") runtime packages"
  else
    local site torch_lib
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null \
      || echo "$venv/lib/python3/site-packages")
    torch_lib="$site/torch/lib"
    # Runtime shared objects of the bundle only (versioned files and their soname links): no
    # headers, no unversioned dev symlinks, no .a.
    run mkdir -p "$prefix/lib" "$prefix/py/torch"
    run find "$bundle/usr/lib" -name '*.so.*' \( -type f -o -type l \) -exec cp -a -t "$prefix/lib" {} +
    # torch/lib's RPATHs point at ../../nvidia/*/lib: keep both folders side by side.
    run cp -a "$torch_lib" "$prefix/py/torch/lib"
    run rm -f "$prefix/py/torch/lib/libtorch_python.so" "$prefix/py/torch/lib/libshm.so"
    run cp -a "$site/nvidia" "$prefix/py/nvidia"
  fi
  run cp "$src/scripts/docker-build-steps.sh" "$prefix/share/docker-build-steps.sh"
}

# Library folders of the staged tree (cuda): the bundle's runtime libraries, torch/lib and every
# nvidia/*/lib of the wheels (their layout differs between CUDA 12 and 13 wheels, hence the glob).
staged_lib_dirs() {
  local d
  echo "$prefix/lib"
  echo "$prefix/py/torch/lib"
  for d in "$prefix"/py/nvidia/*/lib "$prefix"/py/nvidia/*/*/lib; do [ -d "$d" ] && echo "$d"; done
  return 0
}

step_runtime() {
  if [ "$variant" = cpu ]; then
    local list="$prefix/share/runtime-packages.txt"
    if [ "$dry" = 1 ] && [ ! -f "$list" ]; then
      log "would apt-get install the packages of $list"
    else
      mapfile -t pkgs < "$list"
      apt_install "${pkgs[@]}"
    fi
  else
    # The binaries' build RPATHs point into the build stage; the loader finds the staged copies
    # through ld.so.conf instead (no LD_LIBRARY_PATH to forget in `docker run --entrypoint`).
    if [ "$dry" = 1 ]; then
      log "would list the staged library folders in /etc/ld.so.conf.d/00-ditserve.conf and run ldconfig"
    else
      staged_lib_dirs > /etc/ld.so.conf.d/00-ditserve.conf
      ldconfig
    fi
  fi
  run useradd --system --uid "$RUNTIME_UID" --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin ditserve
  [ "$dry" = 1 ] && return 0
  # Every binary must find all of its libraries in the final image, except the driver's
  # (libcuda, libnvidia-ml), which the NVIDIA container toolkit mounts when the container starts.
  local b unresolved
  for b in "$prefix"/bin/*; do
    unresolved=$(ldd "$b" | grep 'not found' | grep -Ev 'lib(cuda|nvidia-ml)\.so' || true)
    [ -z "$unresolved" ] || die "unresolved libraries in $b:"$'\n'"$unresolved"
  done
  log "all binaries resolve their libraries"
}

case "$step" in
  bundle) step_bundle ;;
  deps) step_deps ;;
  build) step_build ;;
  stage) step_stage ;;
  runtime) step_runtime ;;
  all) for s in deps build stage runtime; do step=$s; "step_$s"; done ;;
  *) die "unknown step $step" ;;
esac
