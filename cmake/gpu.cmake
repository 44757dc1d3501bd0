# The GPU backend: -DMEDTUNE_GPU=none|cuda|hip|hip-cpu (docs/gpu.md).
#
# none (the default) adds nothing: the CPU build, its targets and its tests are exactly as without
# this file. cuda or hip compile the SAME src/gpu/*.cu files with CMake's CUDA or HIP language into
# one library, medtune_gpu; src/gpu/vendor.h is the only source that knows which (it sees
# MEDTUNE_GPU_CUDA or MEDTUNE_GPU_HIP). With a backend, tests/gpu/ (the op tests, CTest label
# `gpu`) is added too.
#
# hip-cpu is a checking build, not a backend for users: the same .cu files, rewritten by
# tests/gpu/hip_cpu/rewrite.pl into plain C++ against HIP-CPU (AMD's header-only HIP runtime for
# CPUs; -DMEDTUNE_HIP_CPU_DIR=its source tree), run every kernel on the CPU, so that the whole GPU
# backend (medtune --device gpu, medtune-parity --device gpu, the op tests) runs on a machine
# without a GPU. tests/gpu/hip_cpu/README.md says what that checks and what it cannot.
#
# Architectures: CMAKE_CUDA_ARCHITECTURES defaults to 80;90 (A100, H100/H200),
# CMAKE_HIP_ARCHITECTURES to gfx90a (MI200); pass either on the command line to change them.
# tests/gpu/CMakeLists.txt also includes this file when it is configured on its own (the GPU
# machine's build, scripts/gpu-check.sh); MEDTUNE_GPU_STANDALONE is set there.
set(MEDTUNE_GPU "none" CACHE STRING "GPU backend: none, cuda, hip or hip-cpu (a checking build)")
set_property(CACHE MEDTUNE_GPU PROPERTY STRINGS none cuda hip hip-cpu)
if(MEDTUNE_GPU STREQUAL "none")
  return()
endif()

get_filename_component(MEDTUNE_GPU_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
file(GLOB MEDTUNE_GPU_SOURCES CONFIGURE_DEPENDS "${MEDTUNE_GPU_ROOT}/src/gpu/*.cu")

if(MEDTUNE_GPU STREQUAL "cuda")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 (Debian 12) knows nvcc's dialect flags only up to C++17, and CUDA targets take the
  # project's CXX_STANDARD 20: teach it the flag (nvcc >= 12 has -std=c++20).
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(MEDTUNE_GPU_LANG CUDA)
  set(MEDTUNE_GPU_DEFINE MEDTUNE_GPU_CUDA)
elseif(MEDTUNE_GPU STREQUAL "hip")
  if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES gfx90a)
  endif()
  enable_language(HIP)
  set(CMAKE_HIP_STANDARD 20)
  set(CMAKE_HIP_STANDARD_REQUIRED ON)
  set(MEDTUNE_GPU_LANG HIP)
  set(MEDTUNE_GPU_DEFINE MEDTUNE_GPU_HIP)
elseif(MEDTUNE_GPU STREQUAL "hip-cpu")
  set(MEDTUNE_HIP_CPU_DIR "" CACHE PATH "HIP-CPU's source tree, for MEDTUNE_GPU=hip-cpu")
  if(NOT EXISTS "${MEDTUNE_HIP_CPU_DIR}/include/hip/hip_runtime.h")
    message(FATAL_ERROR "MEDTUNE_GPU=hip-cpu needs -DMEDTUNE_HIP_CPU_DIR=<a copy of "
      "https://github.com/ROCm/HIP-CPU> (no include/hip/hip_runtime.h under "
      "'${MEDTUNE_HIP_CPU_DIR}'; tests/gpu/hip_cpu/README.md)")
  endif()
  find_package(TBB REQUIRED)  # HIP-CPU's parallel algorithms (Debian: libtbb-dev)
  find_program(MEDTUNE_PERL perl REQUIRED)
  # Each .cu becomes a generated .cpp (launches rewritten); blas.cu's vendor BLAS is replaced by
  # the host's CBLAS in the row-major contract of gpu/blas.h.
  set(hip_cpu_sources "${MEDTUNE_GPU_ROOT}/tests/gpu/hip_cpu/host_blas.cpp")
  set(rewrite "${MEDTUNE_GPU_ROOT}/tests/gpu/hip_cpu/rewrite.pl")
  foreach(cu ${MEDTUNE_GPU_SOURCES})
    get_filename_component(name "${cu}" NAME_WE)
    if(name STREQUAL "blas")
      continue()
    endif()
    set(cpp "${CMAKE_BINARY_DIR}/hip_cpu_src/${name}.cpp")
    add_custom_command(OUTPUT "${cpp}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${CMAKE_BINARY_DIR}/hip_cpu_src"
      COMMAND "${MEDTUNE_PERL}" "${rewrite}" "${cu}" "${cpp}"
      DEPENDS "${cu}" "${rewrite}" VERBATIM)
    list(APPEND hip_cpu_sources "${cpp}")
  endforeach()
  set(MEDTUNE_GPU_SOURCES ${hip_cpu_sources})
  set(MEDTUNE_GPU_LANG CXX)
  set(MEDTUNE_GPU_DEFINE MEDTUNE_GPU_HIP)
else()
  message(FATAL_ERROR "MEDTUNE_GPU must be none, cuda, hip or hip-cpu (got '${MEDTUNE_GPU}')")
endif()

set_source_files_properties(${MEDTUNE_GPU_SOURCES} PROPERTIES LANGUAGE ${MEDTUNE_GPU_LANG})
add_library(medtune_gpu STATIC ${MEDTUNE_GPU_SOURCES})
target_include_directories(medtune_gpu PUBLIC "${MEDTUNE_GPU_ROOT}/src")
target_compile_definitions(medtune_gpu PRIVATE ${MEDTUNE_GPU_DEFINE}
  PUBLIC MEDTUNE_WITH_GPU=1)
# medtune_core: the NF4 code table and DType names (core/nf4.h, core/dtype.h).
target_link_libraries(medtune_gpu PUBLIC medtune_core)
if(MEDTUNE_GPU STREQUAL "cuda")
  # The static runtime: the test binary then needs only the driver on the GPU machine.
  set_target_properties(medtune_gpu PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  # cuBLAS for gpu/blas.h, shared (the static one adds ~0.5 GB of objects to every link); it comes
  # with the toolkit, so the GPU machine's standalone build finds it next to nvcc.
  target_link_libraries(medtune_gpu PUBLIC CUDA::cudart_static CUDA::cublas)
  # Warnings are errors, as for the C++ targets (cmake/warnings.cmake): nvcc's own, and the host
  # compiler's on the host half of each .cu. No fast math: -prec-div/-prec-sqrt stay on (the
  # default), which the tolerances in tests/gpu/ assume.
  target_compile_options(medtune_gpu PRIVATE
    --Werror=all-warnings
    -Xcompiler=-Wall,-Wextra,-Wshadow,-Wdouble-promotion,-Wnull-dereference,-Werror)
elseif(MEDTUNE_GPU STREQUAL "hip-cpu")
  # The kernels see HIP-CPU's headers and, ahead of them, tests/gpu/hip_cpu/hip/ (the two ROCm
  # headers HIP-CPU has no copy of). Warnings off for these generated files: HIP-CPU's headers and
  # kernels passed by value draw notes and warnings from GCC that say nothing about our code,
  # which the cuda and hip builds compile with warnings as errors.
  target_include_directories(medtune_gpu PRIVATE "${MEDTUNE_GPU_ROOT}/tests/gpu/hip_cpu")
  target_include_directories(medtune_gpu SYSTEM PRIVATE "${MEDTUNE_HIP_CPU_DIR}/include")
  target_compile_options(medtune_gpu PRIVATE -w)
  find_package(Threads REQUIRED)
  target_link_libraries(medtune_gpu PUBLIC TBB::tbb Threads::Threads medtune_deps)  # CBLAS
else()
  # hip-lang (found by enable_language(HIP)) links the device runtime into HIP targets; host-only
  # consumers (the test, later the trainer) need amdhip64 through the library.
  if(TARGET hip-lang::amdhip64)
    target_link_libraries(medtune_gpu PUBLIC hip-lang::amdhip64)
  endif()
  # hipBLAS for gpu/blas.h (ROCm's hipblas package; Debian 12 has none: scripts/gpu-compile-check.sh
  # does the HIP compile by hand against tests/gpu/hip_shim instead, see there).
  find_package(hipblas REQUIRED)
  target_link_libraries(medtune_gpu PUBLIC roc::hipblas)
  target_compile_options(medtune_gpu PRIVATE
    -Wall -Wextra -Wshadow -Wdouble-promotion -Wnull-dereference -Werror)
endif()
message(STATUS "GPU backend: ${MEDTUNE_GPU} (${MEDTUNE_GPU_LANG}; architectures "
  "${CMAKE_${MEDTUNE_GPU_LANG}_ARCHITECTURES})")

if(NOT MEDTUNE_GPU_STANDALONE)
  # NCCL (CUDA) or RCCL (ROCm) for the gradient all-reduce of multi-GPU ranks
  # (src/gpu/collectives.cu, src/dist/gpu_collectives.cpp, docs/distributed.md). Only the header
  # is needed to build: the library is opened at run time (dlopen), so nothing else loads it.
  # Optional: without the header, ranks on GPUs exchange through MPI on the host. Not in the
  # standalone test build.
  if(MEDTUNE_GPU STREQUAL "cuda")
    find_path(MEDTUNE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(MEDTUNE_NCCL_INCLUDE)
      target_include_directories(medtune_gpu PRIVATE "${MEDTUNE_NCCL_INCLUDE}")
      set(MEDTUNE_GPU_COLLECTIVES_FOUND ON)
      set(MEDTUNE_GPU_COLLECTIVES_HEADER "${MEDTUNE_NCCL_INCLUDE}/nccl.h")
    endif()
  elseif(MEDTUNE_GPU STREQUAL "hip")
    find_package(rccl QUIET)
    if(rccl_FOUND)
      target_include_directories(medtune_gpu PRIVATE $<TARGET_PROPERTY:rccl::rccl,INTERFACE_INCLUDE_DIRECTORIES>)
      set(MEDTUNE_GPU_COLLECTIVES_FOUND ON)
      set(MEDTUNE_GPU_COLLECTIVES_HEADER "rccl (${rccl_DIR})")
    endif()
  endif()
  if(MEDTUNE_GPU_COLLECTIVES_FOUND)
    target_compile_definitions(medtune_gpu PUBLIC MEDTUNE_GPU_WITH_COLLECTIVES=1)
    target_link_libraries(medtune_gpu PUBLIC ${CMAKE_DL_LIBS})
    message(STATUS "GPU collectives: ${MEDTUNE_GPU_COLLECTIVES_HEADER}, library opened at run time")
  else()
    message(STATUS "GPU collectives: NCCL/RCCL not found; GPU ranks exchange through MPI on the host")
  endif()
  target_link_libraries(medtune_dist PUBLIC medtune_gpu)

  # The GPU backend under the model (backend/backend.h): plain C++ over medtune_gpu, linked into
  # medtune_backend, whose registry then creates it for --device gpu (MEDTUNE_WITH_GPU comes with
  # medtune_gpu). Not in the standalone test build, which has no model.
  add_library(medtune_gpu_backend STATIC "${MEDTUNE_GPU_ROOT}/src/gpu/gpu_backend.cpp")
  target_link_libraries(medtune_gpu_backend PUBLIC medtune_gpu medtune_deps)
  medtune_set_warnings(medtune_gpu_backend)
  target_link_libraries(medtune_backend PUBLIC medtune_gpu_backend)
  add_subdirectory("${MEDTUNE_GPU_ROOT}/tests/gpu" "${CMAKE_BINARY_DIR}/tests/gpu")
  # `medtune doctor` lists this backend's devices and runs the op tests on each: the op-test
  # library brings medtune_gpu and MEDTUNE_WITH_GPU=1 (apps/medtune/cmd_doctor.cpp).
  if(TARGET medtune)
    target_link_libraries(medtune PRIVATE medtune_gpu_optest)
  endif()
endif()
