#include "model/weight_check.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace medtune::model {

namespace {

bool checkable(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

// Index of the first non-finite element of tensor `t`, or -1. Rows are decoded in parallel; the
// smallest bad row wins, so the answer does not depend on the thread count.
int64_t first_nonfinite(const RawTensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return -1;
  const int64_t row = t.shape.empty() ? n : t.shape.back();
  const int64_t rows = n / row;
  const int64_t row_bytes = dtype_row_bytes(t.dtype, row);
  std::atomic<int64_t> bad_row{rows};
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(row));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (r > bad_row.load(std::memory_order_relaxed)) continue;
      dequantize_row(t.dtype, t.data + r * row_bytes, buf.data(), row);
      bool finite = true;
      for (float x : buf) finite &= std::isfinite(x);
      if (!finite) {
        int64_t cur = bad_row.load();
        while (r < cur && !bad_row.compare_exchange_weak(cur, r)) {
        }
      }
    }
  }
  const int64_t r = bad_row.load();
  if (r == rows) return -1;
  std::vector<float> buf(static_cast<size_t>(row));
  dequantize_row(t.dtype, t.data + r * row_bytes, buf.data(), row);
  const auto it = std::find_if(buf.begin(), buf.end(), [](float x) { return !std::isfinite(x); });
  return r * row + (it - buf.begin());
}

float element_value(const RawTensor& t, int64_t element) {
  const int64_t row = t.shape.empty() ? t.numel() : t.shape.back();
  std::vector<float> buf(static_cast<size_t>(row));
  dequantize_row(t.dtype, t.data + element / row * dtype_row_bytes(t.dtype, row), buf.data(), row);
  return buf[static_cast<size_t>(element % row)];
}

}  // namespace

std::optional<NonFiniteWeight> find_nonfinite_weight(const io::Checkpoint& ckpt) {
  for (const auto& [name, t] : ckpt.tensors) {
    if (!checkable(t.dtype) || t.data == nullptr) continue;
    const int64_t e = first_nonfinite(t);
    if (e < 0) continue;
    NonFiniteWeight w;
    w.tensor = name;
    w.file_name = t.name != name ? t.name : "";
    w.element = e;
    const int64_t be = dtype_block_elems(t.dtype);
    w.block = be > 1 ? e / be : -1;
    w.value = element_value(t, e);
    return w;
  }
  return std::nullopt;
}

void check_weights_finite(const io::Checkpoint& ckpt) {
  const auto w = find_nonfinite_weight(ckpt);
  if (!w) return;
  const RawTensor& t = ckpt.tensors.at(w->tensor);
  std::string msg =
      ckpt.path + ": tensor '" + (w->file_name.empty() ? w->tensor : w->file_name) + "'";
  if (!w->file_name.empty()) msg += " (" + w->tensor + ")";
  msg += " holds " +
         std::string(std::isnan(w->value) ? "NaN"
                     : w->value > 0       ? "+Inf"
                                          : "-Inf") +
         " at element " + std::to_string(w->element);
  if (w->block >= 0)
    msg += ", " + std::string(dtype_name(t.dtype)) + " block " + std::to_string(w->block) +
           " (its scale or values)";
  throw BadInput(
      msg + ": the model file is damaged; every output computed from it would be NaN or wrong");
}

}  // namespace medtune::model
