#include "core/tensor_convert.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/quant.h"

namespace medtune {

namespace {
[[noreturn]] void wrong_dtype(const RawTensor& t, const char* wanted) {
  const std::string where = t.file ? t.file->path() + ": " : std::string();
  throw BadInput(where + "tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                 ", expected " + wanted);
}
}  // namespace

std::vector<float> tensor_to_f32(const RawTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::F64) {
    for (size_t i = 0; i < out.size(); ++i) {
      double d;
      std::memcpy(&d, t.data + i * 8, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (t.dtype == DType::I64 || t.dtype == DType::I32) {
    wrong_dtype(t, "a floating-point type");
  } else {
    dequantize_row(t.dtype, t.data, out.data(), t.numel());
  }
  return out;
}

std::vector<double> tensor_to_f64(const RawTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::F64) {
    std::memcpy(out.data(), t.data, out.size() * 8);
  } else if (t.dtype == DType::F32) {
    for (size_t i = 0; i < out.size(); ++i) {
      float f;
      std::memcpy(&f, t.data + i * 4, 4);
      out[i] = static_cast<double>(f);
    }
  } else {
    wrong_dtype(t, "F32 or F64");
  }
  return out;
}

std::vector<int64_t> tensor_to_i64(const RawTensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::I64) {
    std::memcpy(out.data(), t.data, out.size() * 8);
  } else if (t.dtype == DType::I32) {
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t v;
      std::memcpy(&v, t.data + i * 4, 4);
      out[i] = v;
    }
  } else {
    wrong_dtype(t, "I64 or I32");
  }
  return out;
}

}  // namespace medtune
