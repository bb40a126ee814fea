# Precompiled headers, for the sanitizer builds (scripts/sanitize.sh sets TIERFLOW_PCH): the
# standard library's and the third-party headers that most files include, parsed once per build
# instead of once per file (eight files under ASan + UBSan, each compiled twice with and twice
# without in turn: 96.6 s against 114.9; a small suite file 3.4 s against 5.0).
#
# clang refuses a PCH made with other code-generation flags, so there are three: tierflow_pch for
# the libraries and programs, tierflow_pch_fuzz for the sources that carry libFuzzer's coverage
# (tierflow_fuzz_coverage in the top CMakeLists.txt moves a target to it, or leaves those sources
# without one), and tierflow_test_pch, with GoogleTest, for the suites. The plain build
# (scripts/test.sh) uses none, so that a file that forgets an #include fails there.
option(TIERFLOW_PCH "Precompile the standard and third-party headers (scripts/sanitize.sh)" OFF)

set(TIERFLOW_PCH_HEADERS
  <algorithm> <array> <atomic> <cassert> <cctype> <cerrno> <chrono> <cmath> <condition_variable>
  <cstddef> <cstdint> <cstdio> <cstdlib> <cstring> <deque> <filesystem> <fstream> <functional>
  <limits> <map> <memory> <mutex> <numeric> <optional> <random> <set> <span> <sstream>
  <stdexcept> <string> <string_view> <thread> <tuple> <unordered_map> <unordered_set> <utility>
  <variant> <vector>
  <fmt/format.h> <nlohmann/json.hpp> <yaml-cpp/yaml.h>)

# tierflow_pch_owner(NAME [OPTIONS flags...] [HEADERS extra...] [LIBS libs...]): an object library
# of one empty file whose PCH the targets that use it take (REUSE_FROM).
function(tierflow_pch_owner name)
  cmake_parse_arguments(ARG "" "" "OPTIONS;HEADERS;LIBS" ${ARGN})
  add_library(${name} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cc)
  target_compile_options(${name} PRIVATE ${ARG_OPTIONS})
  target_link_libraries(${name} PRIVATE fmt::fmt nlohmann_json::nlohmann_json yaml-cpp ${ARG_LIBS})
  target_precompile_headers(${name} PRIVATE ${TIERFLOW_PCH_HEADERS} ${ARG_HEADERS})
endfunction()

if(TIERFLOW_PCH)
  tierflow_pch_owner(tierflow_pch)
  if(TIERFLOW_FUZZ)
    tierflow_pch_owner(tierflow_pch_fuzz OPTIONS -fsanitize=fuzzer-no-link)
  endif()
  if(TIERFLOW_BUILD_TESTS)
    tierflow_pch_owner(tierflow_test_pch HEADERS <gtest/gtest.h> LIBS GTest::gtest)
  endif()
endif()

# tierflow_use_pch(TARGET [OWNER]): TARGET's C++ files take OWNER's PCH (tierflow_pch by default);
# nothing without TIERFLOW_PCH.
function(tierflow_use_pch target)
  if(NOT TIERFLOW_PCH)
    return()
  endif()
  set(owner tierflow_pch)
  if(ARGC GREATER 1)
    set(owner ${ARGV1})
  endif()
  set_target_properties(${target} PROPERTIES PRECOMPILE_HEADERS_REUSE_FROM ${owner})
  add_dependencies(${target} ${owner})
endfunction()
