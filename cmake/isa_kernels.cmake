# Per-ISA kernel files: src/**/<name>_<isa>.cpp is compiled with that ISA's flags on top of the
# baseline, and is only ever called after core/cpu_features.h has checked that this CPU has it
# (run-time dispatch), so one binary runs on AVX2-only and AVX-512 machines alike.
# The sources belong to the area libraries already (medtune_add_area globs src/<area>/*.cpp).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(MEDTUNE_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c)
  set(MEDTUNE_ISA_FLAGS_avxvnni -mavx2 -mfma -mf16c -mavxvnni)
  set(MEDTUNE_ISA_FLAGS_avx512vnni -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni)
  foreach(isa avx2 avxvnni avx512vnni)
    file(GLOB_RECURSE isa_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*_${isa}.cpp)
    if(isa_sources)
      set_source_files_properties(${isa_sources} PROPERTIES COMPILE_OPTIONS "${MEDTUNE_ISA_FLAGS_${isa}}")
    endif()
  endforeach()
endif()
# The start-up check that the CPU has the baseline needs to know which baseline that is.
if(MEDTUNE_NATIVE)
  set(MEDTUNE_BASELINE_NAME native)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(MEDTUNE_BASELINE_NAME ${MEDTUNE_X86_BASELINE})
else()
  set(MEDTUNE_BASELINE_NAME default)
endif()
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/core/cpu_baseline_check.cpp PROPERTIES
  COMPILE_DEFINITIONS MEDTUNE_BASELINE_NAME="${MEDTUNE_BASELINE_NAME}")
