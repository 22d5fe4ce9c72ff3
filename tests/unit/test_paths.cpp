#include "test_paths.h"

namespace mt::test {
const char* source_dir() { return MESHTRAIN_TEST_SOURCE_DIR; }
const char* cli_binary() { return MESHTRAIN_TEST_CLI_BINARY; }
}  // namespace mt::test
