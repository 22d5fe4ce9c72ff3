# Cross-compiles for aarch64 Linux with Debian's g++-aarch64-linux-gnu against
# arm64 libraries installed through multiarch (dpkg --add-architecture arm64):
# libraries from /usr/lib/aarch64-linux-gnu, headers from /usr/include and
# /usr/include/aarch64-linux-gnu. Used by scripts/cross-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MESHTRAIN_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${MESHTRAIN_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${MESHTRAIN_CROSS_TRIPLE}-g++)
set(CMAKE_AR ${MESHTRAIN_CROSS_TRIPLE}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB ${MESHTRAIN_CROSS_TRIPLE}-ranlib CACHE FILEPATH "")
set(CMAKE_STRIP ${MESHTRAIN_CROSS_TRIPLE}-strip CACHE FILEPATH "")
# GCC's note that passing std::pair by value changed ABI in GCC 10.1 is about
# linking objects built by GCC 9 or older: none are, so the note is noise.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")

# Multiarch: find_library/find_path/find_package look in lib/aarch64-linux-gnu
# and include/aarch64-linux-gnu under each prefix (/usr), never x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE ${MESHTRAIN_CROSS_TRIPLE})
# The cross gcc's own target root (libc, libstdc++) plus / for multiarch -dev
# packages and arch-independent headers/CMake configs (nlohmann-json, CLI11).
set(CMAKE_FIND_ROOT_PATH /usr/${MESHTRAIN_CROSS_TRIPLE} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # build tools run on the host
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# cmake/Dependencies.cmake lists the x86_64 OpenBLAS directories explicitly
# (with NO_DEFAULT_PATH), which the settings above do not filter: ignore the
# host's arch-specific directories so the amd64 copies (installed for the
# native build on the same machine) can never be picked.
set(CMAKE_IGNORE_PATH
  /usr/lib/x86_64-linux-gnu
  /usr/lib/x86_64-linux-gnu/openblas-openmp
  /usr/lib/x86_64-linux-gnu/openblas-pthread
  /usr/lib/x86_64-linux-gnu/cmake
  /usr/include/x86_64-linux-gnu
  /usr/include/x86_64-linux-gnu/openblas-openmp
  /usr/include/x86_64-linux-gnu/openblas-pthread
  /lib/x86_64-linux-gnu)

# Anything that asks pkg-config gets the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR}
  "/usr/lib/${MESHTRAIN_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
