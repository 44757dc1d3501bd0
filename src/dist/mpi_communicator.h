// The MPI engine of dist/communicator.h (OpenMPI from Debian; any MPI-3 library). Compiled only
// when CMake found MPI (MEDTUNE_WITH_MPI). Every collective is watched: a rank that waits longer
// than dist::timeout_s() prints which exchange it was waiting in and ends the job, so a peer
// that hangs (deadlock, a stuck file system, SIGSTOP) cannot keep the job alive forever.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace medtune::dist {

// MPI_Init_thread (FUNNELED: only the main thread calls MPI) and the job's world communicator.
std::unique_ptr<Communicator> make_mpi_world();
// MPI_Finalize, when MPI was initialized and is not finalized.
void finalize_mpi();

}  // namespace medtune::dist
