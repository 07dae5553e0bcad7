#include "train/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "base/hash.h"
#include "train/images.h"
#include "train/numpy_files.h"

namespace edgecost::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 32;  // a data file read whole

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text;
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "x" : "") + std::to_string(dims[i]);
  return text.empty() ? "a scalar" : text;
}

Result<std::string> ReadWhole(const std::string& path) {
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (error) return NotFound("cannot read " + path + ": " + error.message());
  if (size > kMaxFileBytes) {
    return InvalidArgument(path + " has " + std::to_string(size) + " B, more than edgecost reads whole (" +
                           std::to_string(kMaxFileBytes) + ")");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  return bytes;
}

// Per-channel (x - mean) / std over a row's planes (NCHW: a channel is a contiguous plane).
struct Normalizer {
  std::vector<float> mean, std;  // one per channel, after Make
  int64_t plane = 1;             // values per channel in one row

  // `default_mean` and `default_deviation` apply when the user gave neither --mean nor --std.
  static Result<Normalizer> Make(const DataOptions& options, const ModelInput& model, std::vector<float> default_mean,
                                 std::vector<float> default_deviation) {
    const int64_t channels = model.dims.size() == 4 ? std::max<int64_t>(1, model.dims[1]) : 1;
    int64_t row = 1;
    for (size_t i = 1; i < model.dims.size(); ++i) row *= model.dims[i];
    const bool given = !options.mean.empty() || !options.std.empty();
    Normalizer n;
    n.plane = row / channels;
    auto per_channel = [&](std::vector<float> values, float fill,
                           const std::string& flag) -> Result<std::vector<float>> {
      if (values.empty()) values.push_back(fill);
      if (values.size() == 1) values.resize(static_cast<size_t>(channels), values[0]);
      if (static_cast<int64_t>(values.size()) != channels) {
        return InvalidArgument(flag + " has " + std::to_string(values.size()) + " values; the model's input has " +
                               std::to_string(channels) + " channels (give one value per channel, or one for all)");
      }
      return values;
    };
    EC_ASSIGN_OR_RETURN(n.mean, per_channel(given ? options.mean : default_mean, 0.0f, "--mean"));
    EC_ASSIGN_OR_RETURN(n.std, per_channel(given ? options.std : default_deviation, 1.0f, "--std"));
    for (float s : n.std) {
      if (!(s > 0)) return InvalidArgument("--std values must be positive");
    }
    return n;
  }
  float operator()(float x, int64_t element) const {
    const size_t c = static_cast<size_t>(element / plane);
    return (x - mean[c]) / std[c];
  }
};

// A row's dims (the model's input without its batch rows) and their elements.
std::vector<int64_t> RowDims(const ModelInput& model) { return {model.dims.begin() + 1, model.dims.end()}; }
int64_t RowElements(const ModelInput& model) {
  int64_t n = 1;
  for (int64_t d : RowDims(model)) n *= d;
  return n;
}

// Records held in memory as an array of N rows (NumPy's, or CIFAR-10's pixels), converted when read.
class ArrayRecords : public Records {
 public:
  ArrayRecords(NumpyArray inputs, std::vector<int32_t> labels, Normalizer normalizer, std::string description)
      : inputs_(std::move(inputs)),
        labels_(std::move(labels)),
        normalizer_(std::move(normalizer)),
        description_(std::move(description)) {
    row_ = inputs_.shape.empty() || inputs_.shape[0] == 0 ? 0 : inputs_.count() / inputs_.shape[0];
  }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Result<int32_t> Read(int64_t index, float* out) const override {
    const float scale = inputs_.kind == 'u' ? 1.0f / 255.0f : 1.0f;  // bytes are pixels
    for (int64_t e = 0; e < row_; ++e) {
      out[e] = normalizer_(static_cast<float>(inputs_.At(index * row_ + e)) * scale, e);
    }
    return labels_[static_cast<size_t>(index)];
  }
  std::string Describe() const override { return description_; }

 private:
  NumpyArray inputs_;
  std::vector<int32_t> labels_;
  Normalizer normalizer_;
  std::string description_;
  int64_t row_ = 0;
};

Result<std::unique_ptr<Records>> ArraysFor(NumpyArray x, const NumpyArray& y, const std::string& x_name,
                                           const std::string& y_name, const DataOptions& options,
                                           const ModelInput& model, const std::string& origin) {
  const std::vector<int64_t> row = RowDims(model);
  if (x.shape.empty() || std::vector<int64_t>(x.shape.begin() + 1, x.shape.end()) != row) {
    return InvalidArgument(x_name + " holds " + DimsText(x.shape) + " inputs; the model takes N x " + DimsText(row) +
                           " (reshape them to that, C order, e.g. x.reshape(-1, " +
                           [&] {
                             std::string s;
                             for (size_t i = 0; i < row.size(); ++i) s += (i ? ", " : "") + std::to_string(row[i]);
                             return s;
                           }() +
                           "))");
  }
  const bool column = y.shape.size() == 2 && y.shape[1] == 1;
  if (!(y.shape.size() == 1 || column) || y.shape[0] != x.shape[0]) {
    return InvalidArgument(y_name + " holds " + DimsText(y.shape) + " labels for " + std::to_string(x.shape[0]) +
                           " inputs; it needs one integer class per input (shape (" + std::to_string(x.shape[0]) +
                           ",))");
  }
  std::vector<int32_t> labels(static_cast<size_t>(y.shape[0]));
  for (int64_t i = 0; i < y.shape[0]; ++i) {
    const double v = y.At(i);
    const std::string where = y_name + "[" + std::to_string(i) + "]";
    // Range first: a NaN or a huge float must not reach the integer conversion.
    if (!(v >= 0 && v < static_cast<double>(model.classes))) {
      return InvalidArgument(where + " has label " + std::to_string(v) + "; the model's loss has " +
                             std::to_string(model.classes) + " classes (labels 0.." +
                             std::to_string(model.classes - 1) + ")");
    }
    if (v != std::floor(v)) return InvalidArgument(where + " is " + std::to_string(v) + ", not an integer class index");
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  EC_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::Make(options, model, {}, {}));
  const std::string description = origin + " (" + std::to_string(labels.size()) + " records, " + x.DtypeName() + ")";
  return std::unique_ptr<Records>(
      new ArrayRecords(std::move(x), std::move(labels), std::move(normalizer), description));
}

// The labels file of an inputs .npy: `<label key>.npy` beside `<input key>.npy`, or `P_y.npy` beside `P_x.npy`.
Result<std::string> LabelsPathFor(const fs::path& inputs, const DataOptions& options) {
  const std::string stem = inputs.stem().string();
  std::string labels;
  if (stem == options.input_key) {
    labels = options.label_key;
  } else if (stem.size() > options.input_key.size() + 1 && stem.ends_with("_" + options.input_key)) {
    labels = stem.substr(0, stem.size() - options.input_key.size()) + options.label_key;
  } else {
    return InvalidArgument("which file holds the labels of " + inputs.string() + "? Name the pair " +
                           options.input_key + ".npy and " + options.label_key + ".npy (or P_" + options.input_key +
                           ".npy and P_" + options.label_key + ".npy), or give both: --data INPUTS.npy,LABELS.npy");
  }
  return (inputs.parent_path() / (labels + ".npy")).string();
}

Result<std::unique_ptr<Records>> OpenNpy(const std::string& inputs_path, const std::string& labels_path,
                                         const DataOptions& options, const ModelInput& model) {
  EC_ASSIGN_OR_RETURN(const std::string x_bytes, ReadWhole(inputs_path));
  EC_ASSIGN_OR_RETURN(NumpyArray x, ParseNpy(x_bytes, inputs_path));
  EC_ASSIGN_OR_RETURN(const std::string y_bytes, ReadWhole(labels_path));
  EC_ASSIGN_OR_RETURN(const NumpyArray y, ParseNpy(y_bytes, labels_path));
  return ArraysFor(std::move(x), y, inputs_path, labels_path, options, model, inputs_path + " and " + labels_path);
}

Result<std::unique_ptr<Records>> OpenNpz(const std::string& path, const DataOptions& options, const ModelInput& model) {
  EC_ASSIGN_OR_RETURN(const std::string bytes, ReadWhole(path));
  using Members = std::map<std::string, std::string>;
  EC_ASSIGN_OR_RETURN(Members members, ReadZip(bytes, path, kMaxFileBytes,
                                               {options.input_key + ".npy", options.label_key + ".npy"}));
  std::vector<NumpyArray> arrays;
  for (const std::string& key : {options.input_key, options.label_key}) {
    const auto it = members.find(key + ".npy");
    if (it == members.end()) {
      std::string keys;
      for (const auto& [name, content] : members)
        keys += (keys.empty() ? "" : ", ") + name.substr(0, name.rfind(".npy"));
      return InvalidArgument(path + " has no array '" + key + "' (it has: " + (keys.empty() ? "none" : keys) +
                             "); name the inputs and labels with --data-keys INPUTS,LABELS");
    }
    EC_ASSIGN_OR_RETURN(NumpyArray array, ParseNpy(it->second, path + ":" + key));
    std::string().swap(it->second);  // the parsed copy is the one kept
    arrays.push_back(std::move(array));
  }
  return ArraysFor(std::move(arrays[0]), arrays[1], path + ":" + options.input_key, path + ":" + options.label_key,
                   options, model, path);
}

Result<std::unique_ptr<Records>> OpenCifar(const std::string& path, const DataOptions& options,
                                           const ModelInput& model) {
  if (RowDims(model) != std::vector<int64_t>{3, 32, 32}) {
    return InvalidArgument("CIFAR-10 images are 3x32x32 but the model takes " + DimsText(RowDims(model)) +
                           " per row; use a model with 32x32 RGB input (e.g. resnet18_cifar)");
  }
  if (model.classes < 10) {
    return InvalidArgument("CIFAR-10 has 10 classes; the model's loss has " + std::to_string(model.classes));
  }
  EC_ASSIGN_OR_RETURN(const std::string file, ReadWhole(path));
  const int64_t size = static_cast<int64_t>(file.size());
  if (size == 0 || size % kCifarRecord != 0) {
    return InvalidArgument(path +
                           " is not in CIFAR-10's binary format (records of 1 label byte and 3072 pixel bytes; " +
                           std::to_string(size) + " B is not a multiple of 3073)");
  }
  const int64_t records = size / kCifarRecord;
  NumpyArray pixels;
  pixels.kind = 'u';
  pixels.item_bytes = 1;
  pixels.shape = {records, 3, 32, 32};
  pixels.data.reserve(static_cast<size_t>(records * kCifarPixels));
  std::vector<int32_t> labels;
  for (int64_t r = 0; r < records; ++r) {
    const auto label = static_cast<uint8_t>(file[static_cast<size_t>(r * kCifarRecord)]);
    if (label > 9) {
      return InvalidArgument(path + ": record " + std::to_string(r) + " has label " + std::to_string(label) +
                             "; CIFAR-10 labels are 0..9");
    }
    labels.push_back(label);
    pixels.data.append(file, static_cast<size_t>(r * kCifarRecord + 1), static_cast<size_t>(kCifarPixels));
  }
  EC_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::Make(options, model, {0.5f}, {0.25f}));
  return std::unique_ptr<Records>(new ArrayRecords(std::move(pixels), std::move(labels), std::move(normalizer),
                                                   path + " (" + std::to_string(records) + " CIFAR-10 records)"));
}

// An image folder: files found once, decoded when read.
// An image as the data set was opened: the file a name held then (a symlink swapped in later, or
// another file renamed over it, is not that file).
struct ImageFile {
  std::string path;
  int32_t label = 0;
  dev_t device = 0;
  ino_t inode = 0;
};

// The bytes of `file`, as long as its name still holds the file it held when the data set was opened.
Result<std::string> ReadSameFile(const ImageFile& file) {
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot read " + file.path + ": " + std::strerror(errno));
  struct stat st {};
  std::string bytes;
  const bool same = ::fstat(fd, &st) == 0 && st.st_dev == file.device && st.st_ino == file.inode;
  if (same && static_cast<uintmax_t>(st.st_size) <= kMaxFileBytes) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (!same) {
    return FailedPrecondition(file.path + " is not the file it was when the data set was opened (replaced, or "
                                          "swapped for a link): not read");
  }
  if (static_cast<uintmax_t>(st.st_size) > kMaxFileBytes) {
    return InvalidArgument(file.path + " has " + std::to_string(st.st_size) + " B, more than edgecost reads whole");
  }
  return bytes;
}

class FolderRecords : public Records {
 public:
  FolderRecords(std::vector<ImageFile> files, Normalizer normalizer, int64_t channels, int64_t height, int64_t width,
                std::string description)
      : files_(std::move(files)),
        normalizer_(std::move(normalizer)),
        channels_(channels),
        height_(height),
        width_(width),
        description_(std::move(description)) {}
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Result<int32_t> Read(int64_t index, float* out) const override {
    const ImageFile& file = files_[static_cast<size_t>(index)];
    EC_ASSIGN_OR_RETURN(const std::string bytes, ReadSameFile(file));
    EC_ASSIGN_OR_RETURN(const Image image, DecodeImage(bytes, static_cast<int>(channels_), file.path));
    const std::vector<float> resized = ResizeBilinear(image, height_, width_);
    for (size_t e = 0; e < resized.size(); ++e) {
      out[e] = normalizer_(resized[e] / 255.0f, static_cast<int64_t>(e));
    }
    return file.label;
  }
  std::string Describe() const override { return description_; }

 private:
  std::vector<ImageFile> files_;
  Normalizer normalizer_;
  int64_t channels_, height_, width_;
  std::string description_;
};

bool IsImageFile(const fs::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

// Every image decoded once as the data set opens, so that a broken file is left out from the start
// (and said) rather than failing the run at the step that reads it. Returns what was skipped, in
// words ("" when nothing was).
std::string DropUnreadable(std::vector<ImageFile>& files, int channels) {
  std::vector<std::string> errors(files.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (size_t i = 0; i < files.size(); ++i) {
    Result<std::string> bytes = ReadSameFile(files[i]);
    if (!bytes.ok()) {
      errors[i] = bytes.status().message();
      continue;
    }
    Result<Image> image = DecodeImage(*bytes, channels, files[i].path);
    if (!image.ok()) errors[i] = image.status().message();
  }
  std::vector<ImageFile> readable;
  std::string first;
  size_t dropped = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (errors[i].empty()) {
      readable.push_back(std::move(files[i]));
    } else if (dropped++ == 0) {
      first = errors[i];
    }
  }
  files = std::move(readable);
  if (dropped == 0) return "";
  return std::to_string(dropped) + " unreadable image" + (dropped == 1 ? "" : "s") + " left out, e.g. " + first;
}

Result<std::unique_ptr<Records>> OpenFolder(const std::string& path, const DataOptions& options,
                                            const ModelInput& model) {
  const std::vector<int64_t> row = RowDims(model);
  if (row.size() != 3 || (row[0] != 1 && row[0] != 3)) {
    return InvalidArgument(
        "an image folder feeds a model whose input is C x H x W with 1 or 3 channels; this one takes " + DimsText(row));
  }
  std::error_code error;
  std::vector<std::string> classes;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    if (entry.is_directory(error)) classes.push_back(entry.path().filename().string());
  }
  if (error) return InvalidArgument("cannot list " + path + ": " + error.message());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) {
    return InvalidArgument(path + " has no subfolders: an image folder has one subfolder of images per class");
  }
  if (static_cast<int64_t>(classes.size()) > model.classes) {
    return InvalidArgument(path + " has " + std::to_string(classes.size()) + " class folders; the model's loss has " +
                           std::to_string(model.classes) + " classes");
  }
  std::vector<ImageFile> files;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> found;
    const fs::path folder = fs::path(path) / classes[c];
    for (auto it = fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      if (it.depth() > 16) it.disable_recursion_pending();  // a symlink loop ends here
      if (it->is_regular_file(error) && IsImageFile(it->path())) found.push_back(it->path().string());
    }
    if (error) return InvalidArgument("cannot list " + folder.string() + ": " + error.message());
    if (found.empty()) {
      return InvalidArgument("class folder " + folder.string() + " has no .png, .jpg or .jpeg files");
    }
    std::sort(found.begin(), found.end());
    for (std::string& f : found) {
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0) return NotFound("cannot read " + f + ": " + std::strerror(errno));
      files.push_back({std::move(f), static_cast<int32_t>(c), st.st_dev, st.st_ino});
    }
  }
  const std::string skipped = DropUnreadable(files, static_cast<int>(row[0]));
  if (files.empty()) return InvalidArgument(path + " has no image edgecost can read: " + skipped);
  EC_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::Make(options, model, {}, {}));
  std::string names;
  for (size_t c = 0; c < classes.size() && c < 4; ++c) names += (c ? ", " : "") + classes[c];
  if (classes.size() > 4) names += ", ...";
  const std::string description = path + " (" + std::to_string(files.size()) + " images in " +
                                  std::to_string(classes.size()) + " classes: " + names +
                                  (skipped.empty() ? "" : "; " + skipped) + ")";
  return std::unique_ptr<Records>(
      new FolderRecords(std::move(files), std::move(normalizer), row[0], row[1], row[2], description));
}

}  // namespace

Result<std::vector<std::string>> DataPaths(const std::string& spec) {
  const size_t comma = spec.find(',');
  if (comma == std::string::npos) return std::vector<std::string>{spec};
  const std::string inputs = spec.substr(0, comma), labels = spec.substr(comma + 1);
  if (!inputs.ends_with(".npy") || !labels.ends_with(".npy") || labels.find(',') != std::string::npos) {
    return InvalidArgument("a data set is one path, or INPUTS.npy,LABELS.npy (a pair of .npy files, one comma); "
                           "got '" + spec + "'");
  }
  return std::vector<std::string>{inputs, labels};
}

Result<std::unique_ptr<Records>> OpenRecords(const std::string& path, const DataOptions& options,
                                             const ModelInput& model) {
  if (model.dims.size() < 2) return InvalidArgument("the model's input has no rows to fill");
  EC_ASSIGN_OR_RETURN(const std::vector<std::string> paths, DataPaths(path));
  if (paths.size() == 2) return OpenNpy(paths[0], paths[1], options, model);
  std::error_code error;
  if (fs::is_directory(path, error)) return OpenFolder(path, options, model);
  if (!fs::exists(path, error)) return NotFound(path + " does not exist");
  const std::string extension = fs::path(path).extension().string();
  if (extension == ".npz") return OpenNpz(path, options, model);
  if (extension == ".npy") {
    EC_ASSIGN_OR_RETURN(const std::string labels, LabelsPathFor(path, options));
    return OpenNpy(path, labels, options, model);
  }
  if (extension == ".bin") return OpenCifar(path, options, model);
  return InvalidArgument("which format is " + path +
                         "? --data takes a folder of class subfolders of images, an .npz archive, x.npy (with y.npy "
                         "beside it) or INPUTS.npy,LABELS.npy, or a CIFAR-10 .bin file");
}

DataSource DataSource::Synthetic(int64_t input_elements, int64_t rows, int64_t classes, uint32_t seed,
                                 int64_t id_limit) {
  DataSource source;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(1, id_limit) - 1);
  source.fixed_.inputs.resize(static_cast<size_t>(input_elements));
  for (float& v : source.fixed_.inputs) v = id_limit > 0 ? static_cast<float>(id(rng)) : normal(rng);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(std::max<int64_t>(1, classes)) - 1);
  for (int64_t r = 0; r < rows; ++r) source.fixed_.labels.push_back(label(rng));
  source.rows_ = rows;
  source.description_ = "synthetic (seed " + std::to_string(seed) + ")";
  return source;
}

Result<DataSource> DataSource::Open(const DataOptions& options, const ModelInput& model) {
  if (!(options.val_split >= 0 && options.val_split < 1)) {
    return InvalidArgument("--val-split is the fraction of the data held out: at least 0 and below 1");
  }
  if (options.val_split > 0 && !options.val_path.empty()) {
    return InvalidArgument("give --val-split or --val-data, not both");
  }
  DataSource source;
  EC_ASSIGN_OR_RETURN(std::unique_ptr<Records> records, OpenRecords(options.path, options, model));
  source.records_ = std::move(records);
  source.rows_ = model.dims[0];
  source.sample_elements_ = RowElements(model);
  source.seed_ = options.seed;
  const int64_t n = source.records_->size();
  // Held out before any shuffling: record i when floor((i + 1) f) > floor(i f), every 1/f-th record,
  // so that data sorted by class (a folder) gives each class its share.
  for (int64_t i = 0; i < n; ++i) {
    const bool held = options.val_split > 0 && static_cast<int64_t>(static_cast<double>(i + 1) * options.val_split) >
                                                   static_cast<int64_t>(static_cast<double>(i) * options.val_split);
    (held ? source.held_out_ : source.train_).push_back(i);
  }
  if (!options.val_path.empty()) {
    EC_ASSIGN_OR_RETURN(std::unique_ptr<Records> val, OpenRecords(options.val_path, options, model));
    source.val_records_ = std::move(val);
  }
  if (source.train_records() < source.rows_) {
    return InvalidArgument(source.records_->Describe() + " leaves " + std::to_string(source.train_records()) +
                           " records to train on, fewer than one batch of " + std::to_string(source.rows_) +
                           "; lower --batch-size");
  }
  source.description_ = source.records_->Describe();
  if (options.val_split > 0) {
    source.description_ += ", " + std::to_string(source.held_out_.size()) + " held out (--val-split " +
                           std::to_string(options.val_split).substr(0, 4) + ")";
  } else if (source.val_records_) {
    source.description_ += ", held out: " + source.val_records_->Describe();
  }
  return source;
}

Result<std::string> DataSource::ContentHash() const {
  Fnv1a hash;
  const auto add = [&hash](const void* data, size_t bytes) {
    hash.Add(std::string_view(static_cast<const char*>(data), bytes));
  };
  if (!records_) {
    add(fixed_.inputs.data(), fixed_.inputs.size() * sizeof(float));
    add(fixed_.labels.data(), fixed_.labels.size() * sizeof(int32_t));
    return hash.Hex();
  }
  std::vector<float> sample(static_cast<size_t>(sample_elements_));
  const auto records = [&](const Records& from, const std::vector<int64_t>& indexes) -> Status {
    for (int64_t i : indexes) {
      EC_ASSIGN_OR_RETURN(const int32_t label, from.Read(i, sample.data()));
      add(sample.data(), sample.size() * sizeof(float));
      add(&label, sizeof label);
    }
    return Status::Ok();
  };
  EC_RETURN_IF_ERROR(records(*records_, train_));
  EC_RETURN_IF_ERROR(records(*records_, held_out_));
  if (val_records_) {
    std::vector<int64_t> all(static_cast<size_t>(val_records_->size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    EC_RETURN_IF_ERROR(records(*val_records_, all));
  }
  return hash.Hex();
}

int64_t DataSource::batches_per_epoch() const { return records_ ? train_records() / rows_ : 1; }
int64_t DataSource::dropped_per_epoch() const { return records_ ? train_records() % rows_ : 0; }

std::vector<int64_t> DataSource::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order = train_;
  // Fisher-Yates from a generator seeded by (seed, epoch): each epoch its own order, the same on every run.
  std::seed_seq seq{seed_, static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 rng(seq);
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

Result<Batch> DataSource::Gather(const Records& records, const std::vector<int64_t>& indexes) const {
  Batch batch;
  batch.inputs.resize(static_cast<size_t>(rows_ * sample_elements_));
  for (size_t r = 0; r < indexes.size(); ++r) {
    float* sample = batch.inputs.data() + static_cast<int64_t>(r) * sample_elements_;
    EC_ASSIGN_OR_RETURN(const int32_t label, records.Read(indexes[r], sample));
    // A NaN would train NaN weights without a word (a ReLU turns it into 0 before the loss sees it).
    if (const float* bad = std::find_if(sample, sample + sample_elements_, [](float v) { return !std::isfinite(v); });
        bad != sample + sample_elements_) {
      return InvalidArgument("record " + std::to_string(indexes[r]) + " of " + records.Describe() + " holds " +
                             (std::isnan(*bad) ? "NaN" : "an infinity") + " at element " +
                             std::to_string(bad - sample) + " (after --mean/--std): inputs must be finite numbers");
    }
    batch.labels.push_back(label);
  }
  return batch;
}

Result<Batch> DataSource::BatchFor(int64_t step) {
  if (!records_) return fixed_;
  const int64_t per_epoch = batches_per_epoch();
  const int64_t epoch = step / per_epoch, within = step % per_epoch;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(epoch);
    order_epoch_ = epoch;
  }
  const auto first = order_.begin() + within * rows_;
  return Gather(*records_, std::vector<int64_t>(first, first + rows_));
}

int64_t DataSource::held_out_records() const {
  return val_records_ ? val_records_->size() : static_cast<int64_t>(held_out_.size());
}

int64_t DataSource::held_out_batches() const { return records_ ? (held_out_records() + rows_ - 1) / rows_ : 0; }

Result<Batch> DataSource::HeldOutBatch(int64_t index, int64_t* rows) const {
  const int64_t total = held_out_records();
  if (index < 0 || index >= held_out_batches()) return InvalidArgument("no held-out batch " + std::to_string(index));
  std::vector<int64_t> indexes;
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t k = std::min(index * rows_ + r, total - 1);  // the last batch repeats its last record
    indexes.push_back(val_records_ ? k : held_out_[static_cast<size_t>(k)]);
  }
  *rows = std::min(rows_, total - index * rows_);
  return Gather(val_records_ ? *val_records_ : *records_, indexes);
}

}  // namespace edgecost::train
