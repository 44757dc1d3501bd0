// Crash-safe file replacement: after a crash or power loss, `path` holds either its old content
// or the complete new content, never a truncated mix. Checkpoints and adapters are written this
// way because a half-written file that still parses (or a missing one after a rename that never
// reached the disk) would silently lose a long training run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace medtune::io {

// Writes the concatenation of `pieces` to `path + ".tmp"`, fsyncs it, renames it over `path` and
// fsyncs the containing directory (so the rename itself is durable). Gathering pieces lets a
// caller write a header and many tensors without first copying them into one buffer.
// On failure the temporary file is removed and `path` is untouched. Throws BadInput when the
// destination cannot be created (missing directory, permissions), Internal on I/O errors
// (disk full, fsync failure).
void atomic_write_file(const std::string& path, std::span<const std::span<const uint8_t>> pieces);

// One buffer.
void atomic_write_file(const std::string& path, std::string_view bytes);

}  // namespace medtune::io
