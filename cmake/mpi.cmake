# MPI for data-parallel training and evaluation (src/dist/, docs/distributed.md): Debian's
# OpenMPI (libopenmpi-dev, openmpi-bin; scripts/setup.sh). Linked, but initialized only when a
# launcher (mpirun, srun) started the process: a plain `medtune train` needs no MPI runtime.
# Without the package the build still works and runs one process; a launch of several ranks is
# then refused with a message saying what to install.
find_package(MPI COMPONENTS C)
if(MPI_C_FOUND)
  target_link_libraries(medtune_dist PRIVATE MPI::MPI_C)
  # The C API only: mpi.h in C++ would otherwise pull in the deprecated C++ bindings (libmpi_cxx).
  target_compile_definitions(medtune_dist PRIVATE MEDTUNE_WITH_MPI=1 OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  message(STATUS "MPI: ${MPI_C_LIBRARIES} (MPI ${MPI_C_VERSION})")
else()
  message(WARNING "MPI not found (libopenmpi-dev): medtune will run as a single process only")
endif()
