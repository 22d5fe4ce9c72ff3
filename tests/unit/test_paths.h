#pragma once
// Where tests find the repository (fixtures, configs, docs) and the built
// CLI. The paths are compiled into one object, tests/unit/test_paths.cpp,
// so no other test object holds an absolute path and a compiler cache serves
// them to any clone (cmake/CompilerCache.cmake).
namespace mt::test {
const char* source_dir();
const char* cli_binary();
}  // namespace mt::test

#define MESHTRAIN_SOURCE_DIR (::mt::test::source_dir())
#define MESHTRAIN_BINARY (::mt::test::cli_binary())
