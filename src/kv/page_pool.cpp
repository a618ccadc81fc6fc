// PagePool: fixed-size pages, a free list for reuse, their memory given back on request.

#include "aqpim/page_pool.h"

#include <cstring>
#include <limits>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "core/int_math.h"

namespace aqpim {

PagePool::PagePool(std::size_t page_bytes, std::int64_t max_pages)
    : stride_(round_up(page_bytes, kAlign)), max_pages_(max_pages) {
    AQPIM_CHECK(page_bytes > 0, "page pool: page_bytes must be positive (got 0)");
    AQPIM_CHECK(max_pages >= 0 && max_pages <= std::numeric_limits<std::int32_t>::max(),
                "page pool: max_pages={} must be in 0..{} (0 = no limit)", max_pages,
                std::numeric_limits<std::int32_t>::max());
}

PagePool::~PagePool() {
    for (std::uint8_t* p : pages_) aligned_free(p);
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
        AQPIM_CHECK(!dead_.empty() || pages_.size() < std::size_t(std::numeric_limits<std::int32_t>::max()),
                    "page pool: page ids exhausted");
        auto* memory = static_cast<std::uint8_t*>(aligned_malloc(stride_));  // first: a failure changes nothing
        if (!dead_.empty()) {
            id = dead_.back();
            dead_.pop_back();
        } else {
            id = std::int32_t(pages_.size());
            pages_.push_back(nullptr);
            in_use_.push_back(0);
        }
        pages_[std::size_t(id)] = memory;
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
    for (std::int32_t id : free_) {
        aligned_free(pages_[std::size_t(id)]);
        pages_[std::size_t(id)] = nullptr;
        dead_.push_back(id);
    }
    free_.clear();
}

}  // namespace aqpim
