#pragma once
// Scratch memory of one thread's work, owned by whoever runs the work and passed down to it (as
// ggml passes its work buffer through the compute plan and calm keeps its buffers in one RunState):
// the buffers a kernel reuses from call to call appear in its signature and in a memory count
// (Workspace::bytes), not in a thread_local no caller can see or size.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/threads.h"

namespace aqpim {

/// Heap bytes a buffer holds (its capacity, not its size).
template <class T>
std::size_t heap_bytes(const std::vector<T>& v) {
    return v.capacity() * sizeof(T);
}
template <class T>
std::size_t heap_bytes(const AlignedBuffer<T>& b) {
    return b.size() * sizeof(T);
}

/// One thread's scratch: one part of each type a kernel asks for, default-constructed on first use
/// and kept (grown, never shrunk) until the workspace goes, so a warm call allocates nothing.
/// A part type T has `std::size_t bytes() const`, the heap bytes it holds. Not thread-safe: one
/// workspace serves one thread at a time (a caller running a parallel region keeps one per thread).
class Workspace {
public:
    Workspace() = default;
    Workspace(Workspace&&) noexcept = default;
    Workspace& operator=(Workspace&&) noexcept = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    template <class T>
    T& get() {
        const std::size_t id = part_id<T>();
        if (parts_.size() <= id) parts_.resize(id + 1);
        if (!parts_[id]) parts_[id] = std::make_unique<Held<T>>();
        return static_cast<Held<T>&>(*parts_[id]).value;
    }

    /// Heap bytes of every part, plus the parts themselves.
    std::size_t bytes() const {
        std::size_t b = parts_.capacity() * sizeof(parts_[0]);
        for (const auto& p : parts_)
            if (p) b += p->bytes();
        return b;
    }

private:
    struct Part {
        virtual ~Part() = default;
        virtual std::size_t bytes() const = 0;
    };
    template <class T>
    struct Held final : Part {
        T value;
        std::size_t bytes() const override { return sizeof(Held) + value.bytes(); }
    };
    /// Dense ids of the part types, in the order a process first asks for them.
    static std::size_t next_id() {
        static std::atomic<std::size_t> n{0};
        return n.fetch_add(1, std::memory_order_relaxed);
    }
    template <class T>
    static std::size_t part_id() {
        static const std::size_t id = next_id();
        return id;
    }

    std::vector<std::unique_ptr<Part>> parts_;
};

/// `ws` when a caller passed one, else `local` (a call without a workspace allocates its own
/// scratch and frees it on return).
inline Workspace& workspace_or(Workspace* ws, Workspace& local) { return ws ? *ws : local; }

/// A call's own buffer of n values of T (uninitialized): inside the object, on the caller's stack, up
/// to N values, else on the heap. For scratch of one row's size (a head_dim or a few), where a
/// Workspace would be one more argument for a few hundred bytes and a thread_local is hidden state.
template <class T, std::size_t N>
class LocalBuffer {
public:
    explicit LocalBuffer(std::size_t n) {
        if (n > N) heap_.resize(n);
    }
    LocalBuffer(const LocalBuffer&) = delete;
    LocalBuffer& operator=(const LocalBuffer&) = delete;
    T* data() { return heap_.empty() ? inline_ : heap_.data(); }

private:
    alignas(64) T inline_[N];
    std::vector<T> heap_;
};

/// One Workspace per thread of a parallel_for region (aqpim/threads.h), kept from region to region
/// by whoever runs them (the Transformer's attention, a Python cache handle).
class ThreadWorkspaces {
public:
    /// Call on the region's calling thread before parallel_for(..., n_threads): then every body
    /// may take mine(). The region's workers have indices below its thread count; a region nested
    /// in another runs serially on its caller, whose index is kept.
    void prepare(int n_threads) {
        const int n = std::max(n_threads > 0 ? n_threads : default_threads(), thread_index() + 1);
        if (int(ws_.size()) < n) ws_.resize(std::size_t(n));
    }
    /// The calling thread's workspace (inside a region prepared for it).
    Workspace& mine() { return ws_.at(std::size_t(thread_index())); }
    /// Heap bytes of every thread's workspace.
    std::size_t bytes() const {
        std::size_t b = ws_.capacity() * sizeof(Workspace);
        for (const Workspace& w : ws_) b += w.bytes();
        return b;
    }

private:
    std::vector<Workspace> ws_;
};

}  // namespace aqpim
