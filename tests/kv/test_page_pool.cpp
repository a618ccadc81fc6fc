// PagePool: aligned zeroed pages, reuse of freed pages, the page limit, giving slabs back.

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "aqpim/error.h"
#include "aqpim/page_pool.h"

using namespace aqpim;

TEST(PagePool, PagesAreAlignedZeroedAndDistinct) {
    PagePool pool(1000);
    EXPECT_EQ(pool.page_bytes(), 1024u);  // stride rounded up to 64
    std::set<std::uintptr_t> starts;
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 600; ++i) {  // more than one slab
        const std::int32_t id = pool.allocate();
        ids.push_back(id);
        std::uint8_t* p = pool.page(id);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
        for (std::size_t b = 0; b < pool.page_bytes(); ++b) ASSERT_EQ(p[b], 0) << "page " << id << " byte " << b;
        std::memset(p, 0xab, pool.page_bytes());  // a page never overlaps another
        starts.insert(reinterpret_cast<std::uintptr_t>(p));
    }
    EXPECT_EQ(starts.size(), 600u);
    for (std::int32_t id : ids)
        for (std::size_t b = 0; b < pool.page_bytes(); ++b) ASSERT_EQ(pool.page(id)[b], 0xab);
    EXPECT_EQ(pool.n_used(), 600);
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_EQ(pool.bytes_held(), 600u * 1024u);
}

TEST(PagePool, FreedPagesAreReusedZeroedMostRecentFirst) {
    PagePool pool(256);
    const std::int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
    std::memset(pool.page(b), 7, 256);
    pool.release(a);
    pool.release(b);
    EXPECT_EQ(pool.n_used(), 1);
    EXPECT_EQ(pool.n_free(), 2);
    EXPECT_EQ(pool.n_pages(), 3);
    const std::int32_t d = pool.allocate();
    EXPECT_EQ(d, b);  // most recently freed first
    for (int i = 0; i < 256; ++i) ASSERT_EQ(pool.page(d)[i], 0);
    EXPECT_EQ(pool.allocate(), a);
    EXPECT_EQ(pool.n_pages(), 3);  // no growth while freed pages remain
    EXPECT_NE(pool.allocate(), c);
    EXPECT_EQ(pool.n_pages(), 4);
}

TEST(PagePool, LimitRefusesAndBadReleasesAreErrors) {
    PagePool pool(64, 3);
    const std::int32_t a = pool.allocate();
    pool.allocate();
    pool.allocate();
    try {
        pool.allocate();
        ADD_FAILURE() << "a fourth page was handed out";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("all 3 pages"), std::string::npos) << e.what();
    }
    pool.release(a);
    EXPECT_EQ(pool.allocate(), a);  // a freed page is within the limit
    pool.release(a);
    EXPECT_THROW(pool.release(a), Error);  // twice
    EXPECT_THROW(pool.release(17), Error);
    EXPECT_THROW(pool.release(-1), Error);
    EXPECT_THROW(PagePool(0), Error);
}

TEST(PagePool, ReleaseFreeReturnsWholeFreeSlabs) {
    PagePool pool(std::size_t(512) << 10);  // 512 KiB pages: two per 1 MiB slab
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(pool.allocate());
    for (int i = 0; i < 4; ++i) pool.release(ids[i]);  // slabs {0,1} and {2,3} free, {4} in use
    pool.release_free();
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_EQ(pool.n_used(), 1);
    EXPECT_EQ(pool.bytes_held(), pool.page_bytes());
    pool.page(ids[4])[0] = 1;  // the live page is untouched
    const std::int32_t fresh = pool.allocate();
    EXPECT_GT(fresh, ids[4]);  // ids of released slabs are not reused
    EXPECT_EQ(pool.page(fresh)[0], 0);
    EXPECT_EQ(pool.n_used(), 2);
}
