// xport/detail/pool.hpp: a typed object pool, the storage of a graph's nodes and values.
// Objects are carved from chunks, so a graph's nodes sit close together in creation order
// (passes walk them with few cache misses), creation costs no malloc most of the time, and
// erased objects are reused through a free list. Objects never move. Chunks come from a
// std::pmr::memory_resource (a graph policy's, else new/delete); each chunk remembers the
// resource it came from, so a graph that steals another's nodes frees every chunk correctly.
#pragma once

#include <cstddef>          // std::byte, std::size_t
#include <memory_resource>  // std::pmr::memory_resource, std::pmr::new_delete_resource
#include <new>              // placement new
#include <utility>          // std::forward, std::exchange
#include <vector>           // std::vector

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

template <class T, std::size_t ChunkObjects = 256>
class object_pool {
 public:
  object_pool() = default;
  explicit object_pool(std::pmr::memory_resource* r) noexcept : resource_(r) {}
  object_pool(const object_pool&) = delete;
  object_pool& operator=(const object_pool&) = delete;
  object_pool(object_pool&& o) noexcept
      : chunks_(std::move(o.chunks_)), free_(std::exchange(o.free_, nullptr)),
        next_(std::exchange(o.next_, ChunkObjects)), live_(std::exchange(o.live_, 0)), resource_(o.resource_) {}
  /// Takes `o`'s objects; the resource new chunks come from stays this pool's own.
  object_pool& operator=(object_pool&& o) noexcept {
    if (this == &o) return *this;
    release();
    chunks_ = std::move(o.chunks_);
    free_ = std::exchange(o.free_, nullptr);
    next_ = std::exchange(o.next_, ChunkObjects);
    live_ = std::exchange(o.live_, 0);
    return *this;
  }
  ~object_pool() { release(); }

  [[nodiscard]] std::pmr::memory_resource* resource() const noexcept { return resource_; }
  /// Where chunks made from now on come from (those already made stay where they are).
  void set_resource(std::pmr::memory_resource* r) noexcept { resource_ = r; }

  template <class... Args>
  T* create(Args&&... args) {
    slot* s = free_;
    if (s) {
      free_ = s->next;
    } else {
      if (next_ == ChunkObjects) {
        chunks_.reserve(chunks_.size() + 1);  // before allocating: nothing leaks if this throws
        void* mem = resource_->allocate(sizeof(slot) * ChunkObjects, alignof(slot));
        chunks_.push_back(chunk{static_cast<slot*>(mem), resource_});
        next_ = 0;
      }
      s = &chunks_.back().slots[next_++];
    }
    ++live_;
    return ::new (static_cast<void*>(s->storage)) T(std::forward<Args>(args)...);
  }

  void destroy(T* p) noexcept {
    p->~T();
    auto* s = reinterpret_cast<slot*>(p);
    s->next = free_;
    free_ = s;
    --live_;
  }

  /// Drops all memory; the owner has destroyed every live object.
  void release() noexcept {
    for (const auto& c : chunks_) c.from->deallocate(c.slots, sizeof(slot) * ChunkObjects, alignof(slot));
    chunks_.clear();
    free_ = nullptr;
    next_ = ChunkObjects;
    live_ = 0;
  }

  [[nodiscard]] std::size_t live() const noexcept { return live_; }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return chunks_.size() * ChunkObjects * sizeof(slot); }

 private:
  union slot {
    slot* next;
    alignas(T) std::byte storage[sizeof(T)];
  };
  struct chunk {
    slot* slots;
    std::pmr::memory_resource* from;
  };
  std::vector<chunk> chunks_;
  slot* free_ = nullptr;
  std::size_t next_ = ChunkObjects;
  std::size_t live_ = 0;
  std::pmr::memory_resource* resource_ = std::pmr::new_delete_resource();
};

}  // namespace detail
XPORT_END_NAMESPACE
