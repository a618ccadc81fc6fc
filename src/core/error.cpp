#include "aqpim/error.h"

#include <cstdio>
#include <cstdlib>

namespace aqpim::detail {

void throw_error(const char* /*file*/, int /*line*/, const std::string& msg) { throw Error(msg); }

void assert_fail(const char* file, int line, const char* cond) {
    std::fprintf(stderr, "aqpim: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    std::abort();
}

}  // namespace aqpim::detail
