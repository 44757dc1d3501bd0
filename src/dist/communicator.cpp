#include "dist/communicator.h"

#include <cstdlib>

#include "core/error.h"

namespace medtune::dist {

Share share_of(size_t n, const Communicator& comm) {
  const size_t ranks = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  return {n * r / ranks, n * (r + 1) / ranks};
}

std::string broadcast_string(Communicator& comm, std::string s, int root, const std::string& what) {
  if (comm.size() == 1) return s;
  uint64_t n = s.size();
  comm.broadcast(std::as_writable_bytes(std::span<uint64_t>(&n, 1)), root, what);
  s.resize(n);
  comm.broadcast(std::as_writable_bytes(std::span<char>(s.data(), s.size())), root, what);
  return s;
}

void Communicator::allreduce_sum_device(float*, size_t, const std::string& what) {
  throw Internal(backend_name() + " does not read device memory (" + what + "): stage it through the host");
}

// A world of one has no peer to talk to: reaching these is a bug in the caller.
void SingleProcess::send(std::span<const std::byte>, int to, const std::string& what) {
  throw Internal("send to rank " + std::to_string(to) + " in a single-process run (" + what + ")");
}
void SingleProcess::recv(std::span<std::byte>, int from, const std::string& what) {
  throw Internal("receive from rank " + std::to_string(from) + " in a single-process run (" + what + ")");
}
void SingleProcess::abort_job(int code) { std::exit(code); }

}  // namespace medtune::dist
