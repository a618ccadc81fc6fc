#pragma once
// PagePool: fixed-size pages shared by the sequences of a paged KV cache (the PQ cache keeps its code
// pages and its dense-f16-layer pages here). A page is identified by a stable id; sequences keep page
// tables of ids and give their pages back when they end, and later sequences reuse them (most recently
// freed first, so they are likely still in cache).
//
// Memory: each page is its own 64-byte-aligned allocation, made when the page is first handed out
// and zeroed at every hand-out. Freed pages stay with the pool (counted by bytes_held()) until
// release_free() gives every one of them back to the allocator (where the other pools of the process
// can take the bytes: the PQ cache's code pages and its f16 rows grow and shrink with the lengths of
// its sequences); their ids are handed out again with new memory.
// The pool never holds more than max_pages pages (0 = no limit): allocate() beyond it throws
// aqpim::Error naming the limit, so a cache with a memory budget refuses rather than overcommits.
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

    /// Give every free page's memory back to the allocator (their ids are reused, with new memory).
    void release_free();

private:
    std::size_t stride_;
    std::int64_t max_pages_;
    std::vector<std::uint8_t*> pages_;  ///< [id] page start (nullptr: no memory, the id is in dead_)
    std::vector<std::uint8_t> in_use_;  ///< [id] 1 while handed out
    std::vector<std::int32_t> free_;    ///< ids with memory ready for reuse, most recently freed last
    std::vector<std::int32_t> dead_;    ///< ids whose memory release_free() gave back
    std::int64_t n_used_ = 0;
};

}  // namespace aqpim
