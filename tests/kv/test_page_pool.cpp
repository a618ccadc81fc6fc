// PagePool: aligned zeroed pages, reuse of freed pages, the page limit, giving free pages back.

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
    for (int i = 0; i < 600; ++i) {
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

TEST(PagePool, ReleaseFreeGivesEveryFreePageBackAndReusesItsId) {
    PagePool pool(std::size_t(512) << 10);
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(pool.allocate());
    for (int i : {0, 2, 3}) pool.release(ids[std::size_t(i)]);  // free pages between live ones
    pool.page(ids[1])[0] = 1;
    pool.page(ids[4])[0] = 4;
    pool.release_free();
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_EQ(pool.n_used(), 2);
    EXPECT_EQ(pool.bytes_held(), 2 * pool.page_bytes());
    EXPECT_EQ(pool.page(ids[1])[0], 1);  // the live pages are untouched
    EXPECT_EQ(pool.page(ids[4])[0], 4);
    std::set<std::int32_t> fresh;
    for (int i = 0; i < 3; ++i) {
        const std::int32_t id = pool.allocate();
        fresh.insert(id);
        EXPECT_EQ(pool.page(id)[0], 0);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.page(id)) % 64, 0u);
    }
    EXPECT_EQ(fresh, (std::set<std::int32_t>{ids[0], ids[2], ids[3]})) << "the ids given back are handed out again";
    EXPECT_EQ(pool.n_pages(), 5);
    EXPECT_EQ(pool.allocate(), 5);  // then new ones
}

TEST(PagePool, TheLimitCountsPagesWhoseMemoryWasGivenBackOnlyWhenHandedOutAgain) {
    PagePool pool(64, 2);
    const std::int32_t a = pool.allocate();
    pool.allocate();
    pool.release(a);
    pool.release_free();
    EXPECT_EQ(pool.n_pages(), 1);
    EXPECT_EQ(pool.allocate(), a);
    EXPECT_THROW(pool.allocate(), Error);
}
