// How a process learns that it is one rank of a job: from the environment an MPI launcher sets
// (mpirun: OMPI_COMM_WORLD_SIZE; srun and MPICH's hydra: PMI_SIZE / PMIX_RANK). Only then is
// MPI initialized, on the first call to world(): a plain `medtune train` never touches the MPI
// library beyond having it linked (no daemon, no network probe, no start-up cost).
#pragma once

#include <string>

#include "dist/communicator.h"

namespace medtune::dist {

// True when an MPI launcher started this process (its environment says so).
bool launched_by_mpi();

// This process's job: MPI when launched_by_mpi() (initialized on the first call), else a world
// of one. BadInput when launched by mpirun with more than one rank in a build without MPI.
Communicator& world();

// True once world() has made a world of several ranks.
bool is_distributed();

// "rank R of N: " in a job of several ranks, else "": the prefix of every message a rank prints.
std::string rank_prefix();

// Seconds a rank waits in a collective before it decides a peer has died or hung and ends the
// job (exit code kExitPeerLost). Default 1800 s (transformers' ddp_timeout); the config key
// ddp_timeout or MEDTUNE_DDP_TIMEOUT_S (for tests) set it.
void set_timeout_s(double seconds);
double timeout_s();

// Exit status of a rank that gave up waiting for its peers.
constexpr int kExitPeerLost = 5;

// OpenMP threads for one of `local_size` ranks on this machine when the config leaves num_threads
// at 0 (all cores): the cores the launcher bound this rank to, else an equal share of the machine.
int default_threads(int local_size);

// The normal end of a job: MPI_Finalize when MPI was initialized.
void finalize();

// The error path: when this process is one rank of several, ends the whole job with `code` now
// (the message is printed already); otherwise does nothing and the caller returns `code`.
void abort_job_if_distributed(int code);

}  // namespace medtune::dist
