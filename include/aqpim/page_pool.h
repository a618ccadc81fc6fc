#pragma once
// PagePool: fixed-size pages shared by the sequences of a paged KV cache (the PQ cache keeps its code
// pages and its dense-f16-layer pages here). A page is identified by a stable id; sequences keep page
// tables of ids and give their pages back when they end, and later sequences reuse them (most recently
// freed first, so they are likely still in cache).
//
// Memory: pages are carved out of slabs of several pages (fewer, larger allocations; the pages of a
// slab are adjacent, which keeps a short sequence's pages close together). A page counts as held from
// the first time it is handed out (the untouched rest of a slab is address space, not memory); a page
// handed out is zeroed.
// The pool never holds more than max_pages pages (0 = no limit): allocate() beyond it throws
// aqpim::Error naming the limit, so a cache with a memory budget refuses rather than overcommits.
// Freed pages stay with the pool (counted by bytes_held()) until release_free() returns whole free
// slabs to the system.
//
// Not thread-safe: the caches allocate and free from their append() / remove_sequence(), which the
// KvCache contract runs on one thread; page() may be read concurrently.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace aqpim {

class PagePool {
public:
    /// page_bytes > 0 (each page starts 64-byte aligned: the stride between pages is page_bytes
    /// rounded up to 64, and that stride is what page_bytes() reports and every count uses).
    explicit PagePool(std::size_t page_bytes, std::int64_t max_pages = 0);
    ~PagePool();
    PagePool(const PagePool&) = delete;
    PagePool& operator=(const PagePool&) = delete;

    /// Bytes of one page (the 64-byte-aligned stride).
    std::size_t page_bytes() const { return stride_; }
    std::int64_t max_pages() const { return max_pages_; }

    /// A zeroed page, from the free list if any, else new; throws aqpim::Error past max_pages.
    std::int32_t allocate();
    /// Give a page back (an id not currently handed out is an aqpim::Error).
    void release(std::int32_t id);

    std::uint8_t* page(std::int32_t id) { return pages_[std::size_t(id)]; }
    const std::uint8_t* page(std::int32_t id) const { return pages_[std::size_t(id)]; }

    std::int64_t n_used() const { return n_used_; }                                  ///< handed out
    std::int64_t n_free() const { return std::int64_t(free_.size()); }                ///< ready for reuse
    std::int64_t n_pages() const { return n_used_ + n_free(); }                       ///< used + free
    std::uint64_t bytes_held() const { return std::uint64_t(n_pages()) * stride_; }   ///< all pages

    /// Return the slabs whose pages are all free to the system (their ids are never reused).
    void release_free();

private:
    struct Slab {
        std::uint8_t* data = nullptr;
        std::int32_t first_id = 0;  ///< id of its first page
        std::int32_t n_carved = 0;  ///< pages handed out at least once
        std::int32_t capacity = 0;  ///< pages it has room for
    };
    std::size_t stride_;
    std::int64_t max_pages_;
    std::int32_t pages_per_slab_;
    std::vector<std::uint8_t*> pages_;  ///< [id] page start (nullptr once its slab is released)
    std::vector<std::uint8_t> in_use_;  ///< [id] 1 while handed out
    std::vector<std::int32_t> free_;    ///< ids ready for reuse, most recently freed last
    std::vector<Slab> slabs_;
    std::int64_t n_used_ = 0;
};

}  // namespace aqpim
