// The guarded device: a test device whose memory is host memory that the
// host may touch only inside its kernels and runtime copies. Its pages are
// mapped PROT_NONE except while one of its ops runs, so any code above
// kernels/ that reads or writes a device buffer directly (a host loop, a
// memcpy, a std::fill) dies with SIGSEGV at that line on the CPU, where CI
// runs, instead of on a GPU nobody has at hand. Its table is the CPU kernels,
// so results equal the CPU's bit for bit. Installed with the kernel table
// (`kernels_for`), as `Device::guarded()` ("guarded" in configs).
#pragma once

namespace meshtrain {

// Installs the guarded device's runtime (idempotent); returns true.
bool register_guarded_device();

// Opens the guarded device's memory to the host for this scope (nests);
// the device's ops hold one while they run.
class GuardedAccess {
 public:
  GuardedAccess();
  ~GuardedAccess();
  GuardedAccess(const GuardedAccess&) = delete;
  GuardedAccess& operator=(const GuardedAccess&) = delete;
};

// Whether p points into the guarded device's memory; a guarded op checks
// every pointer it is given, so a kernel handed host memory (which a GPU
// could not read) fails too, naming the op.
bool on_guarded_device(const void* p);

struct KernelTable;
const KernelTable& guarded_kernel_table();

}  // namespace meshtrain
