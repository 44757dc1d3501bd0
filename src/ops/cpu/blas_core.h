// Which OpenBLAS kernels ("core") the fp32 GEMMs run on, and medtune's correction of OpenBLAS's
// own choice where that choice is below what the CPU has (blas_core.cpp says why).
#pragma once

#include <string>

#include "core/cpu_features.h"

namespace medtune::ops {

struct BlasCore {
  std::string detected;  // what OpenBLAS picked at load time ("Prescott", "Haswell", ...)
  std::string active;    // what the GEMMs run on now
  std::string reason;    // why they differ; empty when medtune left OpenBLAS's choice alone
  // Set when the environment's OPENBLAS_CORETYPE holds OpenBLAS below what the CPU runs (kept:
  // the user's choice, or a machine-wide setting meant for other programs): says so, and what
  // medtune would have selected.
  std::string environment_note;
};

// The core to ask OpenBLAS for when it detected `detected` on a CPU with `f`, or "" to keep it:
// "SkylakeX" on an AVX-512 (F, BW, VL) CPU when `detected` is one of OpenBLAS's x86 cores without
// AVX-512 kernels (Haswell and Zen included), "Haswell" on an AVX2 + FMA one when `detected` has
// no AVX2 kernels (an unknown name is kept). Pure: the decision, tested on its own.
std::string better_blas_core(const std::string& detected, const CpuFeatures& f);

// Runs OpenBLAS's core selection again for `name` (its OPENBLAS_CORETYPE names) and returns the
// core it took. Only between BLAS calls: nothing may be inside OpenBLAS meanwhile. Returns ""
// when this OpenBLAS cannot (not a DYNAMIC_ARCH build).
std::string reselect_blas_core(const std::string& name);

// The selection made at program start (before main, before any BLAS call): OpenBLAS's choice,
// corrected by better_blas_core() unless the user set OPENBLAS_CORETYPE.
const BlasCore& blas_core();

}  // namespace medtune::ops
