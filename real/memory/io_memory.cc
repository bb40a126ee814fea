#include "tierflow/real/io_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "tierflow/real/storage.h"

namespace tierflow::real {

void* AllocateIoMemory(int64_t bytes, bool populate) {
  if (bytes < 1) bytes = 1;
  const int64_t length = AlignUp(bytes, kDirectAlignment);
  if (length < kHugePage) {
    void* p = nullptr;
    if (posix_memalign(&p, static_cast<size_t>(kDirectAlignment), static_cast<size_t>(length)) != 0) return nullptr;
    std::memset(p, 0, static_cast<size_t>(length));
    return p;
  }
  // Map a huge page more and unmap the ends around the first kHugePage boundary. Anonymous
  // memory is zero-filled; it is faulted in here, after the advice (in huge pages where the
  // kernel can), so that no timed request pays for the faults.
  const int64_t mapped = length + kHugePage;
  void* m = ::mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(m);
  char* aligned = reinterpret_cast<char*>(AlignUp(reinterpret_cast<intptr_t>(base), kHugePage));
  if (aligned > base) ::munmap(base, static_cast<size_t>(aligned - base));
  char* end = aligned + length;
  if (base + mapped > end) ::munmap(end, static_cast<size_t>(base + mapped - end));
  (void)::madvise(aligned, static_cast<size_t>(length), MADV_HUGEPAGE);  // refused without THP: 4 KiB pages
  if (!populate) return aligned;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(aligned, static_cast<size_t>(length), MADV_POPULATE_WRITE) != 0) std::memset(aligned, 0, static_cast<size_t>(length));
#else
  std::memset(aligned, 0, static_cast<size_t>(length));
#endif
  return aligned;
}

void FreeIoMemory(void* p, int64_t bytes) {
  if (p == nullptr) return;
  if (bytes < 1) bytes = 1;
  const int64_t length = AlignUp(bytes, kDirectAlignment);
  if (length < kHugePage) {
    std::free(p);
  } else {
    ::munmap(p, static_cast<size_t>(length));
  }
}

std::string TransparentHugePageMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return line.substr(open + 1, close - open - 1);
}

std::string HugePageNote(const std::string& mode) {
  if (mode == "madvise" || mode == "always") return "";
  return "note: transparent huge pages are " + (mode.empty() ? std::string("not in this kernel") : "'" + mode + "' here") +
         " (/sys/kernel/mm/transparent_hugepage/enabled): disk buffers are 4 KiB pages, which a virtual disk can move several "
         "times slower than 2 MiB ones, by chance of how they lie in memory (docs/storage.md \"Host memory for I/O\")";
}

}  // namespace tierflow::real
