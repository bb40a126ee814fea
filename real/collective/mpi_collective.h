// Private to real/collective: the MPI back-end (mpi_collective.cc, built with MPI), or stand-ins
// saying it is absent (collective.cc's OpenCollective reports that).
#pragma once

#include <memory>

#include "tierflow/real/collective.h"

namespace tierflow::real::internal {

#ifdef TIERFLOW_HAVE_MPI
constexpr bool HaveMpi() { return true; }
// This process's rank of MPI_COMM_WORLD; MPI initialised (MPI_THREAD_MULTIPLE where the library
// gives it, else one thread at a time) on the first call and finalised at exit.
StatusOr<std::unique_ptr<Collective>> OpenMpiCollective();
#else
constexpr bool HaveMpi() { return false; }
inline StatusOr<std::unique_ptr<Collective>> OpenMpiCollective() { return Unavailable("no MPI in this build"); }
#endif

}  // namespace tierflow::real::internal
