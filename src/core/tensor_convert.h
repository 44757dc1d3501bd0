// Whole-tensor conversions for small tensors (fixtures, biases, token ids). Model weights never
// go through these: they are read in place.
#pragma once

#include <cstdint>
#include <vector>

#include "core/raw_tensor.h"

namespace medtune {

// Any float or quantized dtype -> fp32; F64 is rounded. Throws BadInput for integer tensors.
std::vector<float> tensor_to_f32(const RawTensor& t);
// F64 or F32 -> double.
std::vector<double> tensor_to_f64(const RawTensor& t);
// I64 or I32 -> int64. Throws BadInput for other dtypes.
std::vector<int64_t> tensor_to_i64(const RawTensor& t);

}  // namespace medtune
