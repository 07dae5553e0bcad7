#include "train/numpy_files.h"

#include <zip.h>

#include <cstring>
#include <limits>
#include <memory>

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

// libzip's archive over bytes in memory, closed (without writing) when it goes.
struct ZipCloser {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};
using Zip = std::unique_ptr<zip_t, ZipCloser>;
struct ZipFileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

std::string ZipErrorText(zip_error_t& error) {
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

// The member's bytes, read to its stated size: libzip checks the CRC-32 at the end, and one more
// byte than stated is refused, so a member cannot unpack to more than the directory says.
Result<std::string> ReadMember(zip_t* archive, zip_uint64_t index, uint64_t size, const std::string& what,
                               const std::string& name) {
  std::unique_ptr<zip_file_t, ZipFileCloser> file(zip_fopen_index(archive, index, 0));
  if (file == nullptr) {
    return InvalidArgument(what + ": member '" + name + "' cannot be opened: " + zip_strerror(archive));
  }
  std::string content(size, '\0');
  uint64_t read = 0;
  while (read < size) {
    const zip_int64_t n = zip_fread(file.get(), content.data() + read, size - read);
    if (n <= 0) break;
    read += static_cast<uint64_t>(n);
  }
  char beyond = 0;
  const zip_int64_t extra = read == size ? zip_fread(file.get(), &beyond, 1) : 0;
  if (read != size || extra != 0) {
    const char* error = zip_file_strerror(file.get());
    return InvalidArgument(what + ": member '" + name + "' does not unpack to its " + std::to_string(size) + " B (" +
                           (extra > 0 ? "it holds more" : error) + ")");
  }
  return content;
}

}  // namespace

Result<std::map<std::string, std::string>> ReadZip(std::string_view bytes, const std::string& what,
                                                   uint64_t max_member_bytes, const std::set<std::string>& only) {
  if (bytes.empty()) return InvalidArgument(what + " is empty, not a zip archive");  // libzip: an empty archive
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (source == nullptr) return Internal("libzip: " + ZipErrorText(error));
  // ZIP_CHECKCONS: every entry's local header must agree with the directory and names be unique,
  // so entries cannot share one member's bytes (a zip bomb).
  Zip archive(zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (archive == nullptr) {
    zip_source_free(source);
    return InvalidArgument(what + " is not a readable zip archive: " + ZipErrorText(error));
  }
  zip_error_fini(&error);
  std::map<std::string, std::string> members;
  std::vector<std::pair<zip_uint64_t, zip_stat_t>> wanted;
  uint64_t total = 0;
  const zip_int64_t entries = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t e = 0; e < entries; ++e) {
    zip_stat_t stat;
    if (zip_stat_index(archive.get(), e, 0, &stat) != 0 || !(stat.valid & ZIP_STAT_NAME) ||
        !(stat.valid & ZIP_STAT_SIZE)) {
      return InvalidArgument(what + ": damaged zip entry " + std::to_string(e) + ": " + zip_strerror(archive.get()));
    }
    const std::string name = stat.name;
    if (stat.size > max_member_bytes) {
      return InvalidArgument(what + ": '" + name + "' unpacks to " + std::to_string(stat.size) + " B, more than the " +
                             std::to_string(max_member_bytes) + " B edgecost accepts");
    }
    members[name];  // listed; filled below when asked for
    if (!only.empty() && !only.contains(name)) continue;
    total += stat.size;
    if (total > 2 * max_member_bytes) {
      return InvalidArgument(what + ": its members unpack to more than the " + std::to_string(2 * max_member_bytes) +
                             " B edgecost accepts of one archive");
    }
    wanted.emplace_back(e, stat);
  }
  for (const auto& [index, stat] : wanted) {
    if ((stat.valid & ZIP_STAT_COMP_METHOD) && stat.comp_method != ZIP_CM_STORE && stat.comp_method != ZIP_CM_DEFLATE) {
      return InvalidArgument(what + ": member '" + std::string(stat.name) + "' uses zip method " +
                             std::to_string(stat.comp_method) + "; edgecost reads stored (0) and deflated (8) members");
    }
    EC_ASSIGN_OR_RETURN(members[stat.name], ReadMember(archive.get(), index, stat.size, what, stat.name));
  }
  return members;
}

Result<std::string> WriteZip(const std::vector<std::pair<std::string, std::string>>& members) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (buffer == nullptr) return Internal("libzip: " + ZipErrorText(error));
  Zip archive(zip_open_from_source(buffer, ZIP_TRUNCATE, &error));
  if (archive == nullptr) {
    zip_source_free(buffer);
    return Internal("libzip: " + ZipErrorText(error));
  }
  zip_error_fini(&error);
  zip_source_keep(buffer);  // outlives the archive: it holds the bytes written
  const auto free_buffer = std::unique_ptr<zip_source_t, decltype(&zip_source_free)>(buffer, zip_source_free);
  constexpr time_t kFixedTime = 946728000;  // 2000-01-01 12:00 UTC, that day in every time zone
  for (const auto& [name, content] : members) {
    zip_source_t* member = zip_source_buffer(archive.get(), content.data(), content.size(), 0);
    const zip_int64_t index = member == nullptr ? -1 : zip_file_add(archive.get(), name.c_str(), member, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      if (member != nullptr) zip_source_free(member);
      return InvalidArgument("cannot add '" + name + "' to a zip archive: " + zip_strerror(archive.get()));
    }
    if (zip_set_file_compression(archive.get(), index, ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(archive.get(), index, kFixedTime, 0) != 0) {
      return Internal("libzip: " + std::string(zip_strerror(archive.get())));
    }
  }
  if (zip_close(archive.get()) != 0) {
    return InvalidArgument("cannot write the zip archive: " + std::string(zip_strerror(archive.get())));
  }
  archive.release();  // zip_close freed it
  zip_stat_t stat;
  if (zip_source_stat(buffer, &stat) != 0 || zip_source_open(buffer) != 0) {
    return Internal("libzip: " + std::string(zip_error_strerror(zip_source_error(buffer))));
  }
  std::string bytes(stat.size, '\0');
  const zip_int64_t read = zip_source_read(buffer, bytes.data(), bytes.size());
  zip_source_close(buffer);
  if (read != static_cast<zip_int64_t>(bytes.size())) return Internal("libzip: short read of the archive written");
  return bytes;
}

}  // namespace edgecost::train
