// Workspace: one part per type, kept across calls, every byte counted.

#include <gtest/gtest.h>

#include <vector>

#include "aqpim/workspace.h"

namespace aqpim {
namespace {

struct PartA {
    std::vector<float> x;
    std::size_t bytes() const { return heap_bytes(x); }
};
struct PartB {
    AlignedBuffer<double> y;
    std::size_t bytes() const { return heap_bytes(y); }
};

TEST(Workspace, OnePartPerTypeKeptAndCounted) {
    Workspace w;
    const std::size_t empty = w.bytes();
    PartA& a = w.get<PartA>();
    EXPECT_EQ(&a, &w.get<PartA>());  // the same part on every call
    PartB& b = w.get<PartB>();
    EXPECT_NE(static_cast<void*>(&a), static_cast<void*>(&b));
    const std::size_t with_parts = w.bytes();
    EXPECT_GE(with_parts, empty + sizeof(PartA) + sizeof(PartB));

    a.x.resize(1000);
    b.y.resize(500);
    EXPECT_EQ(w.bytes(), with_parts + a.x.capacity() * sizeof(float) + 500 * sizeof(double));
    EXPECT_EQ(w.get<PartA>().x.size(), 1000u);  // kept between calls

    // Another workspace has parts of its own.
    Workspace other;
    EXPECT_TRUE(other.get<PartA>().x.empty());
    // Moving keeps the parts where they are.
    Workspace moved = std::move(w);
    EXPECT_EQ(&moved.get<PartA>(), &a);
}

TEST(Workspace, OrTakesTheCallersElseTheLocal) {
    Workspace mine, local;
    EXPECT_EQ(&workspace_or(&mine, local), &mine);
    EXPECT_EQ(&workspace_or(nullptr, local), &local);
}

}  // namespace
TEST(Workspace, LocalBufferIsInsideUpToItsSizeElseOnTheHeap) {
    const auto inside = [](const auto& b, const int* p) {
        const auto* lo = reinterpret_cast<const char*>(&b);
        const auto* at = reinterpret_cast<const char*>(p);
        return at >= lo && at < lo + sizeof(b);
    };
    LocalBuffer<int, 8> small(8);
    EXPECT_TRUE(inside(small, small.data()));
    LocalBuffer<int, 8> big(1000);
    EXPECT_FALSE(inside(big, big.data()));
    for (int i = 0; i < 1000; ++i) big.data()[i] = i;  // every value writable (ASan checks the bound)
    EXPECT_EQ(big.data()[999], 999);
}

}  // namespace aqpim
