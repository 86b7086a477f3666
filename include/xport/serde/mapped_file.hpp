// xport/serde/mapped_file.hpp: a .pt2 file mapped read-only, and tensors that are views of it.
//
// `load(path, {.mmap = true})` maps the archive once (PROT_READ, MAP_SHARED) and makes each
// weight a tensor whose storage points into the mapping: nothing is copied, and N processes
// that load one file share its pages through the page cache. The mapping lives as long as the
// last tensor that points into it. The pages are mapped read-only, so a write to a mapped
// tensor is refused by the processor: the process gets SIGSEGV, and neither the file nor any
// other process ever sees the write (check is_mapped() before writing a weight). LibTorch's
// own read-only storages (`set_throw_on_mutable_data_ptr`, 2.1+) are not used: some CPU kernels
// (aten::lstm's) read weights through the mutable data pointer, and would be refused reads.
// Linux and other POSIX systems only.
#pragma once

#include <cerrno>    // errno
#include <cstdint>   // std::uint64_t
#include <cstring>   // std::strerror
#include <memory>    // std::shared_ptr
#include <string>    // std::string

#include <fcntl.h>     // open
#include <sys/mman.h>  // mmap, munmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // close

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <xport/config.hpp>
#include <xport/error.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// A whole file mapped read-only; unmapped when the last owner goes.
class mapped_file {
 public:
  explicit mapped_file(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw load_error("xport.load.open", "cannot open '" + path + "' for reading: " + std::strerror(errno));
    struct ::stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw load_error("xport.load.open", "cannot map '" + path + "': it is empty or not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED)
      throw load_error("xport.load.mmap", "cannot map '" + path + "' (" + std::strerror(err) +
                                              "); load it without mmap to read it into memory");
    base_ = static_cast<const unsigned char*>(p);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { ::munmap(const_cast<unsigned char*>(base_), size_); }

  [[nodiscard]] const unsigned char* data() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0;
};

/// The deleter of a mapped storage: drops its share of the mapping. Its address marks the storages
/// that are mapped (is_mapped).
inline void release_mapping(void* owner) noexcept { delete static_cast<std::shared_ptr<const mapped_file>*>(owner); }

/// A read-only byte storage of `size` bytes at `offset` in `file` (the caller checked the bounds).
inline c10::Storage mapped_storage(const std::shared_ptr<const mapped_file>& file, std::uint64_t offset, std::uint64_t size) {
  void* bytes = const_cast<unsigned char*>(file->data() + offset);
  auto* owner = new std::shared_ptr<const mapped_file>(file);
  c10::DataPtr ptr(bytes, owner, &release_mapping, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<std::size_t>(size), std::move(ptr),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return storage;
}

}  // namespace detail

/// True when `t`'s storage is a view of an archive mapped by `load(path, {.mmap = true})`: its
/// bytes are the file's pages, shared with every process that maps the file, and read-only.
inline bool is_mapped(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().data_ptr().get_deleter() == &detail::release_mapping;
}

XPORT_END_NAMESPACE
