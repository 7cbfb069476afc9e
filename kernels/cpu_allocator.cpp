// A CPU allocator that keeps freed large blocks for the next allocation of their size.
//
// Why: glibc hands every block of 32 MiB or more back to the kernel when it is freed,
// so a full-batch epoch's [N, hidden] activations and gradients are fresh pages
// again at every epoch: faulted and zeroed by the kernel (with huge pages, after
// compaction), 0.35-1.1 s of kernel time in a 1.0 s GCN epoch on 200k vertices,
// varying with how fast the kernel found free pages. The same sizes come back at
// every step of a training loop, so keeping the blocks makes the kernel's share
// nothing, the way tcmalloc does where it is installed.
//
// How: blocks of at least kMinCached bytes are rounded up to a size class (at
// most 1/8 larger), taken from torch's own CPU allocator (which aligns them and
// asks for huge pages) and, when freed, kept in this cache. An allocation of a
// class takes the most recently freed block of it. A miss first releases cached
// blocks (least recently freed first) as far as needed for the blocks in use
// plus the blocks cached never to exceed the most the process had in use at once
// (in size classes): the cache holds no memory the process could not have used
// anyway. Smaller blocks go to torch's allocator unchanged: glibc keeps those in its
// heap for reuse (its threshold for handing blocks back rises up to 32 MiB), and
// caching them here too made small allocations evict large blocks.
//
// Every block this allocator returns is a plain pointer (data == context), as
// torch's default CPU allocator's are; its raw deleter frees small and large
// blocks alike, so code that frees through the raw interface keeps working. Not reported to torch's memory
// profiler on reuse: the profiler sees a block when it is first allocated.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <pthread.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kMinCached = size_t(32) << 20;  // glibc keeps smaller blocks for reuse itself
constexpr uint8_t kPriority = 1;                 // above torch's default (0)

// The size class of n >= kMinCached: n rounded up to an eighth of its power of two.
size_t size_class(size_t n) {
  const int top = 63 - __builtin_clzll(static_cast<unsigned long long>(n));
  const size_t step = size_t(1) << (top - 3);
  return (n + step - 1) / step * step;
}

// Transparent huge pages for the block's whole 2 MiB pages, as torch does itself only when
// THP_MEM_ALLOC_ENABLE was set before its first allocation (a program that imported torch
// before gnnrun did not); where huge pages are off the kernel ignores it.
void ask_for_huge_pages(void* data, size_t size) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

struct Block {
  size_t size;                      // its size class
  c10::DataPtr owner;               // torch's allocation, released when the block leaves the cache
  bool cached = false;
  std::list<void*>::iterator age;   // position in Cache::free_order while cached
};

class Cache final : public c10::Allocator {
 public:
  explicit Cache(c10::Allocator* underlying) : underlying_(underlying) {}

  c10::DataPtr allocate(size_t n) override {
    if (n < kMinCached) return underlying_->allocate(n);  // freed by torch's deleter, no lock
    const size_t size = size_class(n);
    std::lock_guard<std::mutex> lock(mutex_);
    void* data = take(size);
    if (data == nullptr) {
      // Keep in use + cached within the most ever in use, this block counted.
      const size_t limit = std::max(peak_in_use_, in_use_ + size);
      evict(in_use_ + cached_ + size > limit ? in_use_ + cached_ + size - limit : 0);
      c10::DataPtr owner = underlying_->allocate(size);
      data = owner.get();
      ask_for_huge_pages(data, size);
      blocks_.emplace(data, Block{size, std::move(owner)});
      in_use_ += size;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      ++misses_;
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // Frees a block this allocator returned: cached when it is a large one (small ones
  // reach here only through the raw interface).
  void give_back(void* data) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(data);
      if (it != blocks_.end()) {
        Block& block = it->second;
        block.cached = true;
        block.age = free_order_.insert(free_order_.end(), data);
        free_by_size_[block.size].push_back(data);
        in_use_ -= block.size;
        cached_ += block.size;
        return;
      }
    }
    small_deleter_(data);
  }

  // Releases every cached block; returns the bytes released.
  int64_t release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t before = cached_;
    evict(SIZE_MAX);
    return static_cast<int64_t>(before);
  }

  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(hits_), static_cast<int64_t>(misses_),
            static_cast<int64_t>(in_use_), static_cast<int64_t>(cached_),
            static_cast<int64_t>(peak_in_use_), static_cast<int64_t>(evicted_)};
  }

  void set_small_deleter(c10::DeleterFnPtr deleter) { small_deleter_ = deleter; }
  std::mutex& mutex() { return mutex_; }

  static void release(void* data);

 private:
  // The most recently freed cached block of `size`, now in use; nullptr if none.
  void* take(size_t size) {
    auto slot = free_by_size_.find(size);
    if (slot == free_by_size_.end() || slot->second.empty()) return nullptr;
    void* data = slot->second.back();
    slot->second.pop_back();
    Block& block = blocks_.at(data);
    free_order_.erase(block.age);
    block.cached = false;
    cached_ -= size;
    in_use_ += size;
    ++hits_;
    return data;
  }

  // Releases cached blocks, least recently freed first, until `need` bytes are released
  // or none are left.
  void evict(size_t need) {
    size_t released = 0;
    while (released < need && !free_order_.empty()) {
      void* data = free_order_.front();
      free_order_.pop_front();
      auto it = blocks_.find(data);
      auto& same = free_by_size_[it->second.size];
      for (auto p = same.begin(); p != same.end(); ++p) {
        if (*p == data) {
          same.erase(p);
          break;
        }
      }
      released += it->second.size;
      cached_ -= it->second.size;
      evicted_ += it->second.size;
      blocks_.erase(it);  // drops torch's DataPtr: the memory goes back to glibc
    }
  }

  c10::Allocator* underlying_;
  c10::DeleterFnPtr small_deleter_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;                      // every large block, in use or cached
  std::unordered_map<size_t, std::vector<void*>> free_by_size_;  // cached blocks by size class
  std::list<void*> free_order_;                                  // cached blocks, oldest free first
  size_t in_use_ = 0, cached_ = 0, peak_in_use_ = 0, hits_ = 0, misses_ = 0, evicted_ = 0;
};

Cache* g_cache = nullptr;  // never destroyed: tensors may be freed during interpreter exit

void Cache::release(void* data) { g_cache->give_back(data); }

// A fork must not leave the child with the cache's lock held by a thread it does not have.
void before_fork() { g_cache->mutex().lock(); }
void after_fork() { g_cache->mutex().unlock(); }

bool install() {
  if (g_cache != nullptr) return true;
  c10::Allocator* current = c10::GetCPUAllocator();
  c10::DeleterFnPtr deleter = current->raw_deleter();
  if (deleter == nullptr) return false;  // not a plain allocator: leave it alone
  g_cache = new Cache(current);
  g_cache->set_small_deleter(deleter);
  pthread_atfork(before_fork, after_fork, after_fork);
  c10::SetCPUAllocator(g_cache, kPriority);
  return c10::GetCPUAllocator() == g_cache;
}

std::vector<int64_t> stats() {
  if (g_cache == nullptr) return {0, 0, 0, 0, 0, 0};
  return g_cache->stats();
}

int64_t release_all() { return g_cache == nullptr ? 0 : g_cache->release_all(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def("cpu_allocator_install() -> bool", &install);
  m.def("cpu_allocator_stats() -> int[]", &stats);
  m.def("cpu_allocator_release() -> int", &release_all);
}
