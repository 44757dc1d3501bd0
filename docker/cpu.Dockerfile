# medtune, CPU only (the default build). Not built by anyone yet: the development machine has no
# registry access (docs/gpu.md, "Docker").
#   docker build -f docker/cpu.Dockerfile -t medtune:cpu .
#   docker run --rm medtune:cpu doctor
#   docker run --rm -v $PWD/models:/models medtune:cpu eval ...
# Debian 12 is the project's reference platform (scripts/setup.sh): same compiler (g++ 12), same
# library versions as CI.
FROM debian:12-slim

ARG DEBIAN_FRONTEND=noninteractive
# scripts/setup.sh's build packages minus the fuzzing, screenshot and Python extras.
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config git ca-certificates \
      libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libpcre2-dev \
      libssl-dev libicu-dev libgtest-dev libgmock-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src/medtune
COPY . .
# MEDTUNE_NATIVE=OFF: the image must run on CPUs other than the one that built it (the default ON
# means -march=native). The SIMD the image then uses is what `medtune doctor` reports.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DMEDTUNE_NATIVE=OFF \
    && cmake --build /build -j"$(nproc)" --target medtune medtune-parity \
    && install -m 0755 /build/medtune /build/medtune-parity /usr/local/bin/

ENTRYPOINT ["medtune"]
CMD ["doctor"]
