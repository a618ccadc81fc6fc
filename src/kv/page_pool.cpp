// PagePool: fixed-size pages carved from slabs, a free list for reuse.

#include "aqpim/page_pool.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "core/int_math.h"

namespace aqpim {

namespace {
constexpr std::size_t kSlabBytes = std::size_t(1) << 20;  // pages per slab: as many as fit in 1 MiB (at least 1)
constexpr std::int32_t kMaxSlabPages = 256;
}  // namespace

PagePool::PagePool(std::size_t page_bytes, std::int64_t max_pages)
    : stride_(round_up(page_bytes, kAlign)), max_pages_(max_pages) {
    AQPIM_CHECK(page_bytes > 0, "page pool: page_bytes must be positive (got 0)");
    AQPIM_CHECK(max_pages >= 0 && max_pages <= std::numeric_limits<std::int32_t>::max(),
                "page pool: max_pages={} must be in 0..{} (0 = no limit)", max_pages,
                std::numeric_limits<std::int32_t>::max());
    pages_per_slab_ = std::int32_t(std::clamp<std::size_t>(kSlabBytes / stride_, 1, kMaxSlabPages));
}

PagePool::~PagePool() {
    for (const Slab& s : slabs_) aligned_free(s.data);
}

std::int32_t PagePool::allocate() {
    std::int32_t id;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        AQPIM_CHECK(max_pages_ == 0 || n_pages() < max_pages_,
                    "page pool: all {} pages of {} bytes ({} bytes) are in use; no page left to allocate", max_pages_,
                    stride_, std::uint64_t(max_pages_) * stride_);
        AQPIM_CHECK(pages_.size() < std::size_t(std::numeric_limits<std::int32_t>::max()),
                    "page pool: page ids exhausted");
        if (slabs_.empty() || slabs_.back().n_carved == slabs_.back().capacity) {
            std::int64_t cap = pages_per_slab_;
            if (max_pages_ > 0) cap = std::min<std::int64_t>(cap, max_pages_ - n_pages());
            Slab s;
            s.data = static_cast<std::uint8_t*>(aligned_malloc(std::size_t(cap) * stride_));
            s.first_id = std::int32_t(pages_.size());
            s.capacity = std::int32_t(cap);
            slabs_.push_back(s);
        }
        Slab& s = slabs_.back();
        id = std::int32_t(pages_.size());
        AQPIM_ASSERT(id == s.first_id + s.n_carved);
        pages_.push_back(s.data + std::size_t(s.n_carved) * stride_);
        in_use_.push_back(0);
        ++s.n_carved;
    }
    std::memset(pages_[std::size_t(id)], 0, stride_);
    in_use_[std::size_t(id)] = 1;
    ++n_used_;
    return id;
}

void PagePool::release(std::int32_t id) {
    AQPIM_CHECK(id >= 0 && std::size_t(id) < pages_.size() && in_use_[std::size_t(id)] == 1,
                "page pool: page {} is not allocated", id);
    in_use_[std::size_t(id)] = 0;
    free_.push_back(id);
    --n_used_;
}

void PagePool::release_free() {
    std::vector<std::uint8_t> drop(pages_.size(), 0);
    for (Slab& s : slabs_) {
        if (s.n_carved == 0) continue;
        bool all_free = true;
        for (std::int32_t i = 0; i < s.n_carved && all_free; ++i) all_free = in_use_[std::size_t(s.first_id + i)] == 0;
        if (!all_free) continue;
        for (std::int32_t i = 0; i < s.n_carved; ++i) {
            drop[std::size_t(s.first_id + i)] = 1;
            pages_[std::size_t(s.first_id + i)] = nullptr;
        }
        aligned_free(s.data);
        s.data = nullptr;
    }
    free_.erase(std::remove_if(free_.begin(), free_.end(), [&](std::int32_t id) { return drop[std::size_t(id)] != 0; }),
                free_.end());
    slabs_.erase(std::remove_if(slabs_.begin(), slabs_.end(), [](const Slab& s) { return s.data == nullptr; }),
                 slabs_.end());
    // Ids are carved in order: once a slab is gone, later pages come from a new slab.
    for (Slab& s : slabs_) s.capacity = s.n_carved;
}

}  // namespace aqpim
