// Where each rank of a data-parallel job reads the checkpoint the job continues from.
//
// Rank 0 alone chooses it (`--resume auto`: the newest valid checkpoint in its output_dir; or the
// folder the user named). Where output_dir is one folder that every rank sees (a shared file
// system), every rank reads that checkpoint where it is. Where it is not (each machine writes to
// its own disk, and rank 0 alone has written checkpoints), a rank that does not find the same
// checkpoint (under the same folder name in its own output_dir for `auto`, else at the same path;
// the same checksums.sha256, every file verifying) receives the files
// from rank 0 over the job's communicator into a private temporary folder, verifies them against
// rank 0's checksums, and reads them from there. Either way every rank resumes from the same
// bytes; nothing is written into any rank's output_dir.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "train/checkpoint_dir.h"

namespace medtune::train {

class ResumeSource {
 public:
  ResumeSource() = default;
  explicit ResumeSource(std::optional<CheckpointEntry> checkpoint) : checkpoint_(std::move(checkpoint)) {}
  ~ResumeSource() { remove_received_copy(); }
  // Deletes the received copy's temporary folder, once its files have been read (no-op otherwise).
  void remove_received_copy();
  ResumeSource(ResumeSource&& other) noexcept;
  ResumeSource& operator=(ResumeSource&&) = delete;
  ResumeSource(const ResumeSource&) = delete;
  ResumeSource& operator=(const ResumeSource&) = delete;

  // Where this rank reads the checkpoint (rank 0's folder, or the received copy); nullopt: the
  // job starts fresh.
  const std::optional<CheckpointEntry>& checkpoint() const { return checkpoint_; }
  // Rank 0's path of it, for messages and the run summary (the same as checkpoint() unless received).
  const std::string& chosen_path() const { return chosen_path_.empty() && checkpoint_ ? checkpoint_->path : chosen_path_; }
  // The ranks that did not see the checkpoint and received it (the same list on every rank).
  const std::vector<int>& received_by() const { return received_by_; }

 private:
  friend ResumeSource agree_on_resume_point(dist::Communicator&, const std::optional<CheckpointEntry>&,
                                            const std::string&);
  std::optional<CheckpointEntry> checkpoint_;
  std::string chosen_path_;
  std::string temp_dir_;  // the received copy's folder, removed with this object
  std::vector<int> received_by_;
};

// Collective. `chosen`: rank 0's choice (the other ranks' argument is ignored). `own_output_dir`:
// with `--resume auto`, this rank's output_dir, where it looks for a folder of the name rank 0
// chose; "" (an explicit checkpoint folder): it looks at rank 0's path. Throws BadInput when a
// received file does not match rank 0's checksum.
ResumeSource agree_on_resume_point(dist::Communicator& comm, const std::optional<CheckpointEntry>& chosen,
                                   const std::string& own_output_dir);

}  // namespace medtune::train
