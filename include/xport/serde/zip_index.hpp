// xport/serde/zip_index.hpp: a bounds-checked index of a zip archive's records.
// The archive itself is read and written by LibTorch's PyTorchStreamReader/Writer; this index
// is the loader's own check of the central directory before it trusts any size in it: every
// record must be stored (not compressed), lie inside the file, and have a sane name. It also
// tells where each record's bytes start, so weights are read straight into tensor storage.
#pragma once

#include <algorithm>      // std::min
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint64_t
#include <cstring>        // std::memcpy
#include <map>            // std::map
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <vector>         // std::vector

#include <caffe2/serialize/read_adapter_interface.h>

#include <xport/config.hpp>
#include <xport/error.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

struct zip_record {
  std::uint64_t data_offset = 0;  ///< where the stored bytes start in the file
  std::uint64_t size = 0;
};

/// Records by name, without the archive's root folder (`archive/models/model.json` is
/// `models/model.json`).
class zip_index {
 public:
  explicit zip_index(caffe2::serialize::ReadAdapterInterface& in) : in_(in), file_size_(in.size()) { scan(); }

  [[nodiscard]] const zip_record* find(const std::string& name) const {
    const auto it = records_.find(name);
    return it == records_.end() ? nullptr : &it->second;
  }
  [[nodiscard]] const zip_record& at(const std::string& name) const {
    if (const auto* r = find(name)) return *r;
    throw load_error("xport.load.missing_record", "record '" + name + "' is missing from the archive");
  }
  [[nodiscard]] const std::map<std::string, zip_record>& records() const noexcept { return records_; }
  [[nodiscard]] const std::string& root() const noexcept { return root_; }

  /// The bytes of a record (bounded by the file's size, checked by the scan).
  [[nodiscard]] std::string read(const std::string& name) const {
    const auto& r = at(name);
    std::string out(static_cast<std::size_t>(r.size), '\0');
    read_exact(r.data_offset, out.data(), out.size(), name);
    return out;
  }
  void read_exact(std::uint64_t pos, void* dst, std::size_t n, const std::string& what) const {
    if (pos > file_size_ || n > file_size_ - pos)
      throw load_error("xport.load.truncated", what + ": " + std::to_string(n) + " bytes at offset " +
                                                   std::to_string(pos) + " run past the end of the file (" +
                                                   std::to_string(file_size_) + " bytes)");
    if (n == 0) return;
    const auto got = in_.read(pos, dst, n, what.c_str());
    if (got != n)
      throw load_error("xport.load.truncated", what + ": could read only " + std::to_string(got) + " of " +
                                                   std::to_string(n) + " bytes at offset " + std::to_string(pos));
  }

 private:
  static std::uint64_t le(const unsigned char* p, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  [[noreturn]] void bad(const std::string& what, std::uint64_t at) const {
    throw load_error("xport.load.bad_zip", "not a valid archive: " + what + " (offset " + std::to_string(at) + ")");
  }

  /// Where the central directory lies and how many entries it has.
  struct central_directory {
    std::uint64_t entries = 0, size = 0, offset = 0;
  };

  /// Reads the end-of-central-directory record (and the zip64 one it points at, if any).
  [[nodiscard]] central_directory find_central_directory() const {
    constexpr std::uint64_t eocd_size = 22;
    if (file_size_ < eocd_size) bad("the file is too small to be a zip archive (" + std::to_string(file_size_) + " bytes)", 0);
    // the end-of-central-directory record: within the last 22 + 65535 bytes
    const std::uint64_t tail = std::min<std::uint64_t>(file_size_, eocd_size + 65535);
    std::vector<unsigned char> buf(static_cast<std::size_t>(tail));
    read_exact(file_size_ - tail, buf.data(), buf.size(), "end of central directory");
    std::size_t eocd = buf.size();
    for (std::size_t i = buf.size() - eocd_size + 1; i-- > 0;)
      if (le(&buf[i], 4) == 0x06054b50) {
        eocd = i;
        break;
      }
    if (eocd == buf.size()) bad("no end-of-central-directory record", file_size_);
    const std::uint64_t eocd_pos = file_size_ - tail + eocd;
    std::uint64_t entries = le(&buf[eocd + 10], 2);
    std::uint64_t cd_size = le(&buf[eocd + 12], 4);
    std::uint64_t cd_offset = le(&buf[eocd + 16], 4);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
      // zip64: a locator right before the EOCD points at the zip64 EOCD record
      if (eocd_pos < 20) bad("zip64 locator missing", eocd_pos);
      unsigned char loc[20];
      read_exact(eocd_pos - 20, loc, 20, "zip64 locator");
      if (le(loc, 4) != 0x07064b50) bad("zip64 locator missing", eocd_pos - 20);
      const std::uint64_t z = le(loc + 8, 8);
      unsigned char rec[56];
      read_exact(z, rec, 56, "zip64 end of central directory");
      if (le(rec, 4) != 0x06064b50) bad("bad zip64 end-of-central-directory signature", z);
      entries = le(rec + 32, 8);
      cd_size = le(rec + 40, 8);
      cd_offset = le(rec + 48, 8);
    }
    return {entries, cd_size, cd_offset};
  }

  void scan() {
    const auto [entries, cd_size, cd_offset] = find_central_directory();
    if (cd_offset > file_size_ || cd_size > file_size_ - cd_offset) bad("central directory outside the file", cd_offset);
    if (entries > cd_size / 46) bad("more entries (" + std::to_string(entries) + ") than the central directory holds", cd_offset);
    std::vector<unsigned char> cd(static_cast<std::size_t>(cd_size));
    read_exact(cd_offset, cd.data(), cd.size(), "central directory");
    std::size_t p = 0;
    for (std::uint64_t e = 0; e < entries; ++e) p += scan_entry(cd, p, e, cd_offset);
  }

  /// Checks central directory entry `e` (at `p` in `cd`) and its local header, and records it;
  /// returns the entry's length.
  std::uint64_t scan_entry(const std::vector<unsigned char>& cd, std::size_t p, std::uint64_t e, std::uint64_t cd_offset) {
    const std::uint64_t at = cd_offset + p;
    if (p + 46 > cd.size() || le(&cd[p], 4) != 0x02014b50) bad("bad central directory entry " + std::to_string(e), at);
    const auto method = le(&cd[p + 10], 2);
    std::uint64_t comp = le(&cd[p + 20], 4), uncomp = le(&cd[p + 24], 4);
    const auto name_len = le(&cd[p + 28], 2), extra_len = le(&cd[p + 30], 2), comment_len = le(&cd[p + 32], 2);
    std::uint64_t local = le(&cd[p + 42], 4);
    if (p + 46 + name_len + extra_len + comment_len > cd.size()) bad("central directory entry " + std::to_string(e) + " runs past the directory", at);
    std::string name(reinterpret_cast<const char*>(&cd[p + 46]), static_cast<std::size_t>(name_len));
    read_zip64_extra(cd, p + 46 + name_len, p + 46 + name_len + extra_len, name, at, uncomp, comp, local);
    if (method != 0) bad("record '" + name + "' is compressed (method " + std::to_string(method) + "); pt2 records are stored", at);
    if (comp != uncomp) bad("record '" + name + "' has different stored and original sizes", at);
    if (local > file_size_ || file_size_ - local < 30) bad("local header of '" + name + "' outside the file", local);
    unsigned char lh[30];
    read_exact(local, lh, 30, "local header of '" + name + "'");
    if (le(lh, 4) != 0x04034b50) bad("bad local header signature for '" + name + "'", local);
    const std::uint64_t data = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    if (data > file_size_ || uncomp > file_size_ - data) bad("record '" + name + "' (" + std::to_string(uncomp) + " bytes) runs past the end of the file", data);
    const auto slash = name.find('/');
    if (slash == std::string::npos || slash == 0) bad("record '" + name + "' is not under the archive's root folder", at);
    const auto root = name.substr(0, slash);
    if (root_.empty()) root_ = root;
    else if (root != root_) bad("records under two root folders ('" + root_ + "' and '" + root + "')", at);
    if (!records_.emplace(name.substr(slash + 1), zip_record{data, uncomp}).second) bad("record '" + name + "' appears twice", at);
    return 46 + name_len + extra_len + comment_len;
  }

  /// Reads the zip64 extra field among the extra fields in [begin, end) of `cd`: 8-byte values
  /// for the fields that are 0xFFFFFFFF, in order.
  void read_zip64_extra(const std::vector<unsigned char>& cd, std::size_t begin, std::size_t end, const std::string& name,
                        std::uint64_t at, std::uint64_t& uncomp, std::uint64_t& comp, std::uint64_t& local) const {
    for (std::size_t x = begin; x + 4 <= end;) {
      const auto id = le(&cd[x], 2), len = le(&cd[x + 2], 2);
      if (x + 4 + len > end) bad("extra field of '" + name + "' runs past its entry", at);
      if (id == 1) {
        std::size_t q = x + 4;
        const auto take = [&](std::uint64_t& f) {
          if (f != 0xFFFFFFFF) return;
          if (q + 8 > x + 4 + len) bad("short zip64 field in '" + name + "'", at);
          f = le(&cd[q], 8);
          q += 8;
        };
        take(uncomp);
        take(comp);
        take(local);
      }
      x += 4 + len;
    }
  }

  caffe2::serialize::ReadAdapterInterface& in_;
  std::uint64_t file_size_ = 0;
  std::string root_;
  std::map<std::string, zip_record> records_;
};

}  // namespace detail

XPORT_END_NAMESPACE
