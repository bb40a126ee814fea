// Parts of tierflow built as modules (shared objects opened on first use), so that a command
// which does not need a heavy library never loads it: SimGrid and the ns-3 libraries it needs
// (about 60 ms of relocation at every start when linked), protobuf (3 ms). A module exports one C
// function, its entry, which returns what the caller needs of it (a function pointer or a table).
//
// A module is looked up as the dynamic loader looks up a library: on the run path of the
// executable, which holds the build tree's lib/ (CMAKE_BUILD_RPATH) or, installed,
// <prefix>/lib/tierflow. It is opened with RTLD_LOCAL (its symbols stay its own) and never closed.
//
// Thread safety: OpenModuleEntry may be called from any thread; each module is opened once.
#pragma once

#include <string>

#include "tierflow/core/status.h"

namespace tierflow {

// The address of `entry` in module `file` (a file name such as "libtierflow_simgrid.so"),
// opened on the first call for that file; later calls return the first call's result. `needs`
// says what the module is for in the error when it cannot be opened: Unavailable with the
// loader's reason and `needs` ("the simulator runs in this module, which a build without SimGrid
// does not have (apt-get install libsimgrid-dev, then rebuild)"); Internal when the module lacks
// its entry.
StatusOr<void*> OpenModuleEntry(const std::string& file, const std::string& entry, const std::string& needs);

}  // namespace tierflow
