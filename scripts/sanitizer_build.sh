# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: configure a clang-14 ASan + UBSan build
# (docs/reliability.md). Both builds compile every source with the same flags (see AQPIM_SANITIZE
# in CMakeLists.txt), so with ccache the second one reuses the first one's objects.
#   configure_sanitizer_build DIR [extra cmake args...]

# The directory must not enter the hash: build-asan and build-fuzz compile the same sources with
# the same flags, and only line tables (whose compile directory is then the first build's) differ.
export CCACHE_NOHASHDIR=1
# Build jobs: 2 by default (the development machine's 2 cores are shared); AQPIM_BUILD_JOBS=N.
AQPIM_BUILD_JOBS=${AQPIM_BUILD_JOBS:-2}

configure_sanitizer_build() {
    local dir=$1; shift
    local launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    CXX=clang++-14 CC=clang-14 cmake -S . -B "$dir" -G Ninja "${launcher[@]}" \
        -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1" \
        -DAQPIM_SANITIZE=ON -DAQPIM_CUDA=OFF -DAQPIM_PYTHON_MODULE=OFF -DAQPIM_BUILD_BENCH=OFF "$@" >/dev/null
}

# ASan: leaks are reported (LeakSanitizer) and any report fails the run; UBSan: every finding is
# fatal, with a stack. Suppressions (each with its reason) live in scripts/sanitizer-suppressions/.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
