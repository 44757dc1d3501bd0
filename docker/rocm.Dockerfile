# medtune with the HIP backend (-DMEDTUNE_GPU=hip) on ROCm 6 with hipBLAS. Not built by anyone
# yet: the development machine has no registry access (docs/gpu.md, "Docker"), and CMake's HIP
# language has never been exercised on a real ROCm install for this project.
#   docker build -f docker/rocm.Dockerfile -t medtune:rocm .                   # gfx90a (MI200)
#   docker build -f docker/rocm.Dockerfile --build-arg HIP_ARCHS="gfx90a;gfx942" -t medtune:rocm .
#   docker run --rm --device=/dev/kfd --device=/dev/dri --group-add video medtune:rocm doctor
# AMD's rocm/dev-ubuntu-24.04 images carry ROCm's apt repository; Ubuntu 24.04 for ICU >= 72 and
# OpenSSL 3; g++-12 for the host C++ (the project's -Werror set is tuned for GCC 12).
FROM rocm/dev-ubuntu-24.04:6.3

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      g++-12 cmake pkg-config git ca-certificates hipblas-dev \
      libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libpcre2-dev \
      libssl-dev libicu-dev libgtest-dev libgmock-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CC=gcc-12 CXX=g++-12

ARG HIP_ARCHS="gfx90a"
WORKDIR /src/medtune
COPY . .
# ROCm's clang compiles the .cu files as HIP; CMAKE_PREFIX_PATH finds hip-lang and hipblas.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DMEDTUNE_NATIVE=OFF -DMEDTUNE_GPU=hip \
      -DCMAKE_HIP_COMPILER=/opt/rocm/llvm/bin/clang++ -DCMAKE_PREFIX_PATH=/opt/rocm \
      -DCMAKE_HIP_ARCHITECTURES="${HIP_ARCHS}" \
    && cmake --build /build -j"$(nproc)" --target medtune medtune-parity test_gpu_ops \
    && install -m 0755 /build/medtune /build/medtune-parity /build/tests/gpu/test_gpu_ops /usr/local/bin/

ENTRYPOINT ["medtune"]
CMD ["doctor"]
