#pragma once
// Wall-clock timing for tools and benchmarks (never for unit tests).

#include <chrono>

namespace aqpim {

class Timer {
public:
    Timer() : t0_(Clock::now()) {}
    void reset() { t0_ = Clock::now(); }
    double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
    double ms() const { return seconds() * 1e3; }

private:
    using Clock = std::chrono::steady_clock;
    Clock::time_point t0_;
};

}  // namespace aqpim
