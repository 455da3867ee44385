# syntax=docker/dockerfile:1
# ditserve image. Two variants, one file:
#   docker build -t ditserve:cuda .                      (default: LibTorch-CUDA + NCCL, for GPUs)
#   docker build -t ditserve:cpu --build-arg VARIANT=cpu .  (Debian 12 + LibTorch 1.13 CPU)
# Needs BuildKit (Docker >= 23 default) so that only the chosen variant's stages are built.
#
# Every RUN calls scripts/docker-build-steps.sh and nothing else (tests/integration/deploy_checks.sh
# fails otherwise): read that script for what each step does. CI runs the same script (dry-run for
# the apt names, real for `stage`), and the cuda build is scripts/gpu-build.sh, the same command the
# offline GPU host runs. See deploy/README.md.
#
# Why these bases: the CUDA build stage is nvidia/cuda (Ubuntu 24.04: glibc 2.39, g++ 13, like the
# GPU host) with PyTorch's cu130 wheel in a venv, which provides LibTorch-CUDA and NCCL
# (site-packages/nvidia/nccl). gRPC, Protobuf, Abseil, spdlog & co. are Debian 12's packages (the
# versions the code is developed against), taken from a debian:12 stage as the same extracted bundle
# the offline GPU host uses. pytorch/pytorch images were not chosen: they are Ubuntu 22.04 based,
# whose gRPC (1.30) is too old and whose glibc (2.35) cannot run Debian 12's binaries.

ARG VARIANT=cuda
ARG CUDA_VERSION=13.0.1
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04
ARG DEBIAN_IMAGE=debian:12
ARG DEBIAN_RUNTIME_IMAGE=debian:12-slim

# ---- Debian 12 packages for the cuda build, extracted into one folder (scripts/gpu-bundle.sh) ----
FROM ${DEBIAN_IMAGE} AS bundle
COPY scripts/ /src/scripts/
RUN /src/scripts/docker-build-steps.sh bundle cuda

# ---- cuda build ----
FROM ${CUDA_DEVEL_IMAGE} AS build-cuda
ARG TORCH_VERSION=2.11.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
COPY scripts/ /src/scripts/
RUN /src/scripts/docker-build-steps.sh deps cuda
COPY --from=bundle /opt/ditserve-gpu-deps /opt/ditserve-gpu-deps
COPY . /src
RUN /src/scripts/docker-build-steps.sh build cuda
RUN /src/scripts/docker-build-steps.sh stage cuda

# ---- cpu build: scripts/setup.sh, exactly as CI and developers build ----
FROM ${DEBIAN_IMAGE} AS build-cpu
COPY scripts/ /src/scripts/
RUN /src/scripts/docker-build-steps.sh deps cpu
COPY . /src
RUN /src/scripts/docker-build-steps.sh build cpu
RUN /src/scripts/docker-build-steps.sh stage cpu

FROM build-${VARIANT} AS build

# ---- runtime bases: nvidia/cuda "base" (cudart and the container toolkit's settings only: the
#      wheel's nvidia/* libraries are staged instead, so nothing is carried twice) ----
FROM ${CUDA_RUNTIME_IMAGE} AS runtime-cuda
FROM ${DEBIAN_RUNTIME_IMAGE} AS runtime-cpu

# ---- final image: binaries, the tiny model and runtime libraries only ----
FROM runtime-${VARIANT}
ARG VARIANT
COPY --from=build /opt/ditserve /opt/ditserve
RUN --mount=type=bind,source=scripts,target=/src/scripts /src/scripts/docker-build-steps.sh runtime ${VARIANT}
ENV PATH=/opt/ditserve/bin:${PATH} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
WORKDIR /opt/ditserve
# 50051 public gRPC, 9464 Prometheus /metrics (frontend); workers listen on 50060+ (deploy/).
EXPOSE 50051 9464
# The frontend's gRPC health service; compose overrides this per service (workers' ports).
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["ditserve-cli", "health", "--server", "127.0.0.1:50051"]
# Default: serve the generated tiny model with one in-container CPU worker (a smoke test that needs
# no volume and no GPU). deploy/docker-compose.yml runs real models with one worker per GPU.
CMD ["ditserve-frontend", "--model", "/opt/ditserve/models/tiny", "--listen", "0.0.0.0:50051", \
     "--metrics-listen", "0.0.0.0:9464", "--spawn-workers", "1", "--device", "cpu"]
