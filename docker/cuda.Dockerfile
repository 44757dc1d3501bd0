# medtune with the CUDA backend (-DMEDTUNE_GPU=cuda). Not built by anyone yet: the development
# machine has no registry access (docs/gpu.md, "Docker").
#   docker build -f docker/cuda.Dockerfile -t medtune:cuda .          # sm_80 + sm_90 by default
#   docker build -f docker/cuda.Dockerfile --build-arg CUDA_ARCHS=90 -t medtune:cuda .
#   docker run --rm --gpus all medtune:cuda doctor           # devices + GPU op tests vs the CPU
# Ubuntu 24.04 because the project needs ICU >= 72 and OpenSSL 3 (22.04 has ICU 70); g++-12 so
# the host compiler is the project's own (its -Werror set is tuned for GCC 12), which CUDA 12.6
# supports.
FROM nvidia/cuda:12.6.3-devel-ubuntu24.04

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      g++-12 cmake pkg-config git ca-certificates \
      libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libpcre2-dev \
      libssl-dev libicu-dev libgtest-dev libgmock-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CC=gcc-12 CXX=g++-12 CUDAHOSTCXX=g++-12

ARG CUDA_ARCHS="80;90"
WORKDIR /src/medtune
COPY . .
# cuBLAS comes with the devel image (CUDA::cublas); cudart is linked statically.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DMEDTUNE_NATIVE=OFF -DMEDTUNE_GPU=cuda \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" \
    && cmake --build /build -j"$(nproc)" --target medtune medtune-parity test_gpu_ops \
    && install -m 0755 /build/medtune /build/medtune-parity /build/tests/gpu/test_gpu_ops /usr/local/bin/

ENTRYPOINT ["medtune"]
CMD ["doctor"]
