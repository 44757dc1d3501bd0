// BatchCursor: the training loop's walk through the micro-batches of successive epochs, and the
// state of that walk a checkpoint stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "train/batcher.h"
#include "train/checkpoint_state.h"

namespace medtune::train {

// Walks the micro-batches of successive epochs; epoch plans are made as they are reached. Its
// state (epoch, position) is what a checkpoint stores so a resume seeks instead of replaying.
class BatchCursor {
 public:
  BatchCursor(std::vector<int64_t> lengths, BatchPlanOptions opt, const CursorState& at)
      : lengths_(std::move(lengths)), opt_(opt), plan_(plan_epoch(lengths_, opt_, at.epoch)),
        pos_(static_cast<size_t>(at.position)), epoch_(at.epoch), consumed_(at.consumed) {
    if (pos_ > plan_.size())
      throw BadInput("checkpoint cursor: position " + std::to_string(at.position) + " is past the " +
                     std::to_string(plan_.size()) + " micro-batches of epoch " + std::to_string(at.epoch));
  }
  const std::vector<int64_t>& next() {
    if (pos_ >= plan_.size()) {
      plan_ = plan_epoch(lengths_, opt_, ++epoch_);
      pos_ = 0;
    }
    ++consumed_;
    return plan_[pos_++];
  }
  int64_t consumed() const { return consumed_; }
  CursorState state() const {
    return {epoch_, static_cast<int64_t>(pos_), consumed_, plan_sha256(plan_)};
  }

 private:
  std::vector<int64_t> lengths_;
  BatchPlanOptions opt_;
  std::vector<std::vector<int64_t>> plan_;
  size_t pos_ = 0;
  int64_t epoch_ = 0;
  int64_t consumed_ = 0;
};

}  // namespace medtune::train
