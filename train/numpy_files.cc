#include "train/numpy_files.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace edgecost::train {
namespace {

uint32_t Le16(const char* p) {
  return static_cast<uint32_t>(static_cast<uint8_t>(p[0])) | static_cast<uint32_t>(static_cast<uint8_t>(p[1])) << 8;
}
uint32_t Le32(const char* p) { return Le16(p) | Le16(p + 2) << 16; }
uint64_t Le64(const char* p) { return static_cast<uint64_t>(Le32(p)) | static_cast<uint64_t>(Le32(p + 4)) << 32; }

// The value of `key` in the .npy header's Python dict literal, e.g. 'descr': '<f4'.
Result<std::string> HeaderValue(std::string_view header, const std::string& key, const std::string& what) {
  const std::string quoted[] = {"'" + key + "'", "\"" + key + "\""};
  size_t at = std::string_view::npos;
  for (const std::string& q : quoted) {
    at = header.find(q);
    if (at != std::string_view::npos) {
      at += q.size();
      break;
    }
  }
  if (at == std::string_view::npos) return InvalidArgument(what + ": the .npy header has no '" + key + "'");
  while (at < header.size() && (header[at] == ' ' || header[at] == ':')) ++at;
  if (at >= header.size()) return InvalidArgument(what + ": the .npy header ends after '" + key + "'");
  size_t end = at;
  if (header[at] == '\'' || header[at] == '"') {
    end = header.find(header[at], at + 1);
    if (end == std::string_view::npos) return InvalidArgument(what + ": unterminated string in the .npy header");
    return std::string(header.substr(at + 1, end - at - 1));
  }
  if (header[at] == '(') {
    end = header.find(')', at);
    if (end == std::string_view::npos) return InvalidArgument(what + ": unterminated shape in the .npy header");
    return std::string(header.substr(at, end - at + 1));
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  std::string value(header.substr(at, end - at));
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

Result<std::vector<int64_t>> ParseShape(const std::string& text, const std::string& what) {
  std::vector<int64_t> shape;
  size_t i = 1;  // after '('
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size() || text[i] == ')') break;
    if (text[i] < '0' || text[i] > '9') return InvalidArgument(what + ": bad shape " + text + " in the .npy header");
    int64_t d = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) return InvalidArgument(what + ": shape too large");
      d = d * 10 + (text[i++] - '0');
    }
    while (i < text.size() && (text[i] == 'L' || text[i] == ' ')) ++i;  // Python 2's long suffix
    shape.push_back(d);
    if (shape.size() > 32) return InvalidArgument(what + ": more than 32 dimensions");
  }
  return shape;
}

}  // namespace

int64_t NumpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

double NumpyArray::At(int64_t i) const {
  const char* p = data.data() + i * item_bytes;
  switch (kind) {
    case 'f':
      if (item_bytes == 4) {
        const uint32_t bits = Le32(p);
        float v;
        std::memcpy(&v, &bits, sizeof v);
        return v;
      } else {
        const uint64_t bits = Le64(p);
        double v;
        std::memcpy(&v, &bits, sizeof v);
        return v;
      }
    case 'u':
      return static_cast<uint8_t>(p[0]);
    default:
      return item_bytes == 4 ? static_cast<double>(static_cast<int32_t>(Le32(p)))
                             : static_cast<double>(static_cast<int64_t>(Le64(p)));
  }
}

std::string NumpyArray::DtypeName() const {
  if (kind == 'f') return item_bytes == 4 ? "float32" : "float64";
  if (kind == 'u') return "uint8";
  return item_bytes == 4 ? "int32" : "int64";
}

Result<NumpyArray> ParseNpy(std::string_view bytes, const std::string& what) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != "\x93NUMPY") {
    return InvalidArgument(what + " is not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = Le16(bytes.data() + 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return InvalidArgument(what + ": truncated .npy header");
    header_len = Le32(bytes.data() + 8);
    header_at = 12;
  } else {
    return InvalidArgument(what + ": .npy format version " + std::to_string(major) + " (edgecost reads 1 to 3)");
  }
  if (header_len > bytes.size() - header_at) return InvalidArgument(what + ": truncated .npy header");
  const std::string_view header = bytes.substr(header_at, header_len);
  EC_ASSIGN_OR_RETURN(const std::string descr, HeaderValue(header, "descr", what));
  EC_ASSIGN_OR_RETURN(const std::string fortran, HeaderValue(header, "fortran_order", what));
  EC_ASSIGN_OR_RETURN(const std::string shape_text, HeaderValue(header, "shape", what));
  if (fortran != "False") {
    return InvalidArgument(what + " is in Fortran order; save it in C order (np.ascontiguousarray)");
  }
  NumpyArray array;
  static const std::map<std::string, std::pair<char, int>> kDtypes = {
      {"<f4", {'f', 4}}, {"<f8", {'f', 8}}, {"|u1", {'u', 1}}, {"<u1", {'u', 1}}, {"<i4", {'i', 4}}, {"<i8", {'i', 8}}};
  const auto dtype = kDtypes.find(descr);
  if (dtype == kDtypes.end()) {
    return InvalidArgument(what + " holds dtype '" + descr +
                           "'; edgecost reads little-endian float32, float64, uint8, int32 and int64");
  }
  array.kind = dtype->second.first;
  array.item_bytes = dtype->second.second;
  if (shape_text.empty() || shape_text[0] != '(') return InvalidArgument(what + ": bad shape in the .npy header");
  EC_ASSIGN_OR_RETURN(array.shape, ParseShape(shape_text, what));
  const uint64_t available = bytes.size() - header_at - header_len;
  uint64_t count = 1;
  for (int64_t d : array.shape) {
    if (d != 0 && count > available / static_cast<uint64_t>(d)) {
      return InvalidArgument(what + ": its shape needs more bytes than the file's " + std::to_string(bytes.size()));
    }
    count *= static_cast<uint64_t>(d);
  }
  if (count * static_cast<uint64_t>(array.item_bytes) != available) {
    return InvalidArgument(what + ": its shape and dtype need " +
                           std::to_string(count * static_cast<uint64_t>(array.item_bytes)) +
                           " B of data; the file has " + std::to_string(available));
  }
  array.data.assign(bytes.substr(header_at + header_len));
  return array;
}

namespace {

// A member to inflate, as the central directory gives it.
struct ZipEntry {
  std::string name;
  uint32_t method = 0, crc = 0;
  uint64_t data_at = 0, compressed = 0, size = 0;
};

}  // namespace

Result<std::map<std::string, std::string>> ReadZip(std::string_view bytes, const std::string& what,
                                                   uint64_t max_member_bytes, const std::set<std::string>& only) {
  // The end of central directory record: 22 bytes and a comment of at most 65535, at the end.
  constexpr size_t kEndRecord = 22;
  if (bytes.size() < kEndRecord) return InvalidArgument(what + " is not a zip archive (too short)");
  size_t end = std::string_view::npos;
  const size_t lowest = bytes.size() > kEndRecord + 0xffff ? bytes.size() - kEndRecord - 0xffff : 0;
  for (size_t at = bytes.size() - kEndRecord + 1; at-- > lowest;) {
    if (Le32(bytes.data() + at) == 0x06054b50) {
      end = at;
      break;
    }
  }
  if (end == std::string_view::npos) return InvalidArgument(what + " is not a zip archive (no end record)");
  const uint32_t entries = Le16(bytes.data() + end + 10);
  const uint64_t directory_at = Le32(bytes.data() + end + 16);
  std::map<std::string, std::string> members;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // each member's bytes in the archive: [from, to)
  std::vector<ZipEntry> wanted;                       // the members to inflate
  uint64_t total = 0;
  uint64_t at = directory_at;
  for (uint32_t e = 0; e < entries; ++e) {
    if (at > bytes.size() || bytes.size() - at < 46 || Le32(bytes.data() + at) != 0x02014b50) {
      return InvalidArgument(what + ": damaged zip central directory (entry " + std::to_string(e) + ")");
    }
    const char* record = bytes.data() + at;
    const uint32_t method = Le16(record + 10), crc = Le32(record + 16);
    uint64_t compressed = Le32(record + 20), size = Le32(record + 24), local_at = Le32(record + 42);
    const uint32_t name_len = Le16(record + 28), extra_len = Le16(record + 30), comment_len = Le16(record + 32);
    if (bytes.size() - at - 46 < static_cast<uint64_t>(name_len) + extra_len + comment_len) {
      return InvalidArgument(what + ": damaged zip central directory (entry " + std::to_string(e) + ")");
    }
    const std::string name(record + 46, name_len);
    // ZIP64: the sizes and offset that read 0xffffffff follow, in this order, in extra field 0x0001.
    for (uint32_t x = 0; x + 4 <= extra_len;) {
      const char* field = record + 46 + name_len + x;
      const uint32_t id = Le16(field), len = Le16(field + 2);
      if (x + 4 + len > extra_len) break;
      if (id == 0x0001) {
        uint32_t read = 0;
        for (uint64_t* value : {&size, &compressed, &local_at}) {
          if (*value != 0xffffffffu) continue;
          if (read + 8 > len) return InvalidArgument(what + ": damaged ZIP64 field of '" + name + "'");
          *value = Le64(field + 4 + read);
          read += 8;
        }
      }
      x += 4 + len;
    }
    at += 46 + static_cast<uint64_t>(name_len) + extra_len + comment_len;
    if (local_at > bytes.size() || bytes.size() - local_at < 30 || Le32(bytes.data() + local_at) != 0x04034b50) {
      return InvalidArgument(what + ": '" + name + "' has no local header where the directory says");
    }
    const uint64_t data_at = local_at + 30 + Le16(bytes.data() + local_at + 26) + Le16(bytes.data() + local_at + 28);
    if (data_at > bytes.size() || bytes.size() - data_at < compressed) {
      return InvalidArgument(what + ": '" + name + "' runs past the end of the archive");
    }
    if (size > max_member_bytes) {
      return InvalidArgument(what + ": '" + name + "' unpacks to " + std::to_string(size) + " B, more than the " +
                             std::to_string(max_member_bytes) + " B edgecost accepts");
    }
    spans.emplace_back(local_at, data_at + compressed);
    if (!only.empty() && !only.contains(name)) {
      members[name];  // listed, not inflated
      continue;
    }
    total += size;
    if (total > 2 * max_member_bytes) {
      return InvalidArgument(what + ": its members unpack to more than the " + std::to_string(2 * max_member_bytes) +
                             " B edgecost accepts of one archive");
    }
    wanted.push_back({name, method, crc, data_at, compressed, size});
  }
  // One member's bytes named by several entries would unpack it many times over: refused.
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      return InvalidArgument(what + ": zip entries share their bytes (a zip bomb, or a damaged archive)");
    }
  }
  for (const ZipEntry& entry : wanted) {
    const std::string& name = entry.name;
    const uint32_t method = entry.method, crc = entry.crc;
    const uint64_t compressed = entry.compressed, size = entry.size;
    const std::string_view packed = bytes.substr(entry.data_at, compressed);
    std::string content;
    if (method == 0) {
      if (compressed != size) return InvalidArgument(what + ": stored member '" + name + "' has two sizes");
      content.assign(packed);
    } else if (method == 8) {
      content.resize(size);
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Internal("zlib: cannot start inflating");
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
      z.avail_in = static_cast<uInt>(std::min<uint64_t>(packed.size(), std::numeric_limits<uInt>::max()));
      z.next_out = reinterpret_cast<Bytef*>(content.data());
      z.avail_out = static_cast<uInt>(std::min<uint64_t>(size, std::numeric_limits<uInt>::max()));
      const int rc = inflate(&z, Z_FINISH);
      const uint64_t produced = z.total_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END || produced != size) {
        return InvalidArgument(what + ": member '" + name + "' does not inflate to its " + std::to_string(size) +
                               " B (damaged deflate data)");
      }
    } else {
      return InvalidArgument(what + ": member '" + name + "' uses zip method " + std::to_string(method) +
                             "; edgecost reads stored (0) and deflated (8) members");
    }
    const uint32_t actual = static_cast<uint32_t>(
        crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(content.data()), content.size()));
    if (actual != crc) return InvalidArgument(what + ": member '" + name + "' fails its CRC-32 check");
    members[name] = std::move(content);
  }
  return members;
}

}  // namespace edgecost::train
