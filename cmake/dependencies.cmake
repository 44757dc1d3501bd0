# Third-party libraries, all from Debian packages (see scripts/setup.sh):
#   OpenBLAS (OpenMP variant, so BLAS and our own loops share one OpenMP thread pool),
#   nlohmann-json, GoogleTest, OpenSSL (libcrypto: SHA-256), ICU (Unicode normalization).
find_package(OpenMP REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
# yaml-cpp (libyaml-cpp-dev) reads training configs (src/train/train_config.cpp); Debian's 0.7
# exports the target `yaml-cpp`.
find_package(yaml-cpp REQUIRED)
# PCRE2 (libpcre2-dev) runs the tokenizer pre-tokenizer regexes with Unicode properties.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# OpenSSL's libcrypto (libssl-dev) computes SHA-256 for checkpoint checksums and provenance.
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)
# ICU (libicu-dev, 72 on Debian 12) normalizes text for tokenizer.json normalizers (NFC, NFKC,
# Lowercase...): Unicode normalization and case tables are exactly what should not be hand-written.
find_package(ICU 72 REQUIRED COMPONENTS uc)

# Debian installs each OpenBLAS variant in its own folder; prefer the OpenMP one.
find_library(OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT OPENBLAS_LIB)
  find_library(OPENBLAS_LIB NAMES openblas REQUIRED)
endif()
find_path(CBLAS_INCLUDE_DIR NAMES cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
        /usr/include/openblas /usr/include
  REQUIRED)
message(STATUS "BLAS: ${OPENBLAS_LIB} (headers ${CBLAS_INCLUDE_DIR})")
# oneDNN (libdnnl-dev, 2.6; OpenMP runtime, so it shares our thread pool): the bf16 GEMMs of
# `precision: bf16` (ops/cpu/onednn_matmul.cpp), which it dispatches by itself to AVX512-BF16 or
# AMX. Found by hand: Debian's dnnl-config.cmake asks for OpenCL (its GPU runtime), which we never use.
find_library(DNNL_LIB NAMES dnnl REQUIRED)
find_path(DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp REQUIRED)
message(STATUS "oneDNN: ${DNNL_LIB}")

add_library(medtune_deps INTERFACE)
target_include_directories(medtune_deps SYSTEM INTERFACE ${CBLAS_INCLUDE_DIR})
if(NOT DNNL_INCLUDE_DIR STREQUAL "/usr/include")
  target_include_directories(medtune_deps SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})
endif()
target_link_libraries(medtune_deps INTERFACE ${OPENBLAS_LIB} ${DNNL_LIB} OpenMP::OpenMP_CXX
  nlohmann_json::nlohmann_json Threads::Threads PkgConfig::PCRE2 yaml-cpp OpenSSL::Crypto ICU::uc)
# C++ (and C) only: nvcc and hipcc do not take -march for device code (the GPU build's host C++
# files still get it).
if(MEDTUNE_NATIVE)
  target_compile_options(medtune_deps INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:-march=native>)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(medtune_deps INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:-march=${MEDTUNE_X86_BASELINE}>)
endif()
if(MEDTUNE_SANITIZE)
  target_compile_options(medtune_deps INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  target_link_options(medtune_deps INTERFACE -fsanitize=address,undefined)
endif()

# Command-line parsing for apps/ only.
find_package(CLI11 2.1 REQUIRED)
