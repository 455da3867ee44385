# Every third-party dependency is found here, once. Versions: Debian 12 (gRPC 1.51, Protobuf 3.21,
# LibTorch 1.13 CPU) for the default variant; the CUDA variant uses the GPU host's LibTorch 2.11 and
# an extracted bundle of the same Debian packages (see scripts/gpu-bundle.sh and GPU.md).

find_package(Threads REQUIRED)

# Protobuf: Debian ships no CMake config package for protobuf; the FindProtobuf module works with
# the variables below when set (GPU host bundle), and finds the system copy otherwise.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(PNG REQUIRED)

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# LibTorch. On the GPU host: -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
find_package(Torch REQUIRED)
# Torch's cmake adds its flags to TORCH_CXX_FLAGS (ABI); apply them globally.
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")

# SentencePiece (T5 tokenizer): pkg-config on Debian.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# cpp-httplib: header only.
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)

if(DITSERVE_CUDA)
  # LibTorch-CUDA brings the CUDA runtime; NCCL is found by worker/comm/CMakeLists.txt.
  find_package(CUDAToolkit REQUIRED)
  add_compile_definitions(DITSERVE_WITH_CUDA=1)
  # Our own kernels (models/cuda). Torch's CMake config turns CMAKE_CUDA_ARCHITECTURES off (it
  # follows TORCH_CUDA_ARCH_LIST), so the kernels' target sets its architectures from
  # DITSERVE_CUDA_ARCH (scripts/gpu-build.sh --cuda-arch; 90 = H100/H200).
  set(DITSERVE_CUDA_ARCH "90" CACHE STRING "CUDA architectures of models/cuda (CMake list, e.g. 80;90)")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
endif()

# PyTorch wheels ship fmt 12 headers in Torch's include dir; Debian's spdlog 1.10 needs fmt 9. When
# the Debian packages come from an extracted bundle (GPU host), put its include dir before Torch's.
set(DITSERVE_DEPS_PREFIX "" CACHE PATH "Root of an extracted Debian package bundle (GPU host)")
if(DITSERVE_DEPS_PREFIX)
  # Debian keeps some of a library's headers in the multiarch folder (libjpeg-turbo's jconfig.h,
  # which defines JPEG_LIB_VERSION): without it the compiler takes the host's own jconfig.h, and a
  # host whose libjpeg is another ABI (Ubuntu's 8.0) builds a decoder that the bundle's libjpeg.so.62
  # refuses at run time ("Wrong JPEG library version: library is 62, caller expects 80").
  include_directories(BEFORE SYSTEM ${DITSERVE_DEPS_PREFIX}/usr/include
                      ${DITSERVE_DEPS_PREFIX}/usr/include/x86_64-linux-gnu)
endif()

# Reuse the shared precompiled LibTorch header (defined in common/) in a LibTorch target.
function(ditserve_use_torch_pch target)
  if(DITSERVE_TORCH_PCH)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_precompile_headers(${target} REUSE_FROM ditserve_torch_pch_exe)
    else()
      target_precompile_headers(${target} REUSE_FROM ditserve_torch_pch)
    endif()
  endif()
endfunction()
option(DITSERVE_TORCH_PCH "Share one precompiled <torch/torch.h> across LibTorch targets" ON)
