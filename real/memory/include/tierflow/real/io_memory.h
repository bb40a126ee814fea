// Host memory for the buffers that disk requests read into and write from.
//
// O_DIRECT needs kDirectAlignment-aligned places. Beyond that, a request's buffer reaches the
// device as a scatter-gather list of its physically contiguous pieces: memory of 4 KiB pages can
// split a 1 MiB request into 256 segments, which a virtual disk can handle one by one. On this
// project's VM (Firecracker virtio-blk) 1 MiB x 8 O_DIRECT reads moved 1.1-1.6 GB/s from 4 KiB
// pages and 4.5-4.9 GB/s from 2 MiB pages, writes 1.3-2.1 and 3.6-3.7 GB/s; a heap block's
// contiguity is whatever the allocator found, so the same run was fast or slow by chance
// (docs/storage.md "Host memory for I/O"). So every buffer of kHugePage bytes or more is mapped
// kHugePage-aligned and advised for transparent huge pages (MADV_HUGEPAGE: the kernel takes the
// advice under its "madvise" and "always" settings, not under "never"); smaller ones are aligned
// heap blocks. The executor's host blocks, the disk probe's buffers and the pinned arena all come
// from here, so that the probes measure the path the runs take.
#pragma once

#include <cstdint>
#include <string>

namespace tierflow::real {

inline constexpr int64_t kHugePage = int64_t{2} << 20;

// `bytes` (>= 1) of zero-filled memory, kDirectAlignment-aligned (kHugePage-aligned from
// kHugePage up); null when the system has none. Free it with FreeIoMemory and the same size.
// `populate` false leaves a mapping of kHugePage or more to be faulted in where it is first
// touched (by the thread or the kernel that touches it), as much as is touched.
void* AllocateIoMemory(int64_t bytes, bool populate = true);
void FreeIoMemory(void* p, int64_t bytes);

// The kernel's transparent huge page setting ("always", "madvise" or "never"; empty where the
// kernel has none).
std::string TransparentHugePageMode();

// A line for users where the setting `mode` leaves disk buffers in 4 KiB pages ("never", or no
// setting); empty under "madvise" and "always".
std::string HugePageNote(const std::string& mode);

}  // namespace tierflow::real
