// The GPU backend's constructor, defined by src/gpu/gpu_backend.cpp in -DMEDTUNE_GPU=cuda|hip
// builds only (cmake/gpu.cmake links it into medtune_backend and defines MEDTUNE_WITH_GPU).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace medtune::backend {

// The backend of GPU `index` computing its linear layers at `p` (BadInput when there is no such
// device).
std::unique_ptr<Backend> make_gpu_backend(int index, Precision p);
// "cuda" or "hip".
const char* gpu_toolkit_name();

}  // namespace medtune::backend
