// safetensors reading and writing (stage 00): the file format for model weights, training
// checkpoints and the PyTorch oracle fixture. The reader trusts nothing in the file: every
// length, offset and shape is checked before a byte of tensor data is touched, and every
// problem becomes a ConfigError that names the file, what is wrong and what to do.
#include "io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace scalelab {

// The format stores little-endian bytes; scalelab copies them as they are.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// Every dtype of the safetensors specification with its element size in bytes.
constexpr std::pair<const char*, std::size_t> kDtypes[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1},
                                                           {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
                                                           {"BF16", 2},    {"I32", 4}, {"U32", 4}, {"F32", 4},
                                                           {"F64", 8},     {"I64", 8}, {"U64", 8}};

// Bytes per element, 0 for an unknown dtype.
std::size_t dtype_size(const std::string& dtype) {
  for (const auto& [name, size] : kDtypes)
    if (dtype == name) return size;
  return 0;
}

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.first);
  return s;
}

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor of this shape and element size; false when the product overflows.
bool tensor_bytes(const std::vector<std::size_t>& shape, std::size_t elem_size, std::size_t* bytes) {
  std::size_t n = elem_size;
  for (auto d : shape) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) return false;
    n *= d;
  }
  *bytes = n;
  return true;
}

constexpr const char* kCorruptFix = "the file is damaged or not a safetensors file; write it again";

}  // namespace

std::size_t SafetensorsFile::Entry::numel() const {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "safetensors '" + path + "'";
  // ordered_json keeps the tensors in the order given, so the header reads like the data area.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = std::move(md);
  }
  std::set<std::string> names;
  std::vector<std::size_t> sizes;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    require(!t.name.empty() && t.name != "__metadata__", where, "tensor name '" + t.name + "' is empty or reserved",
            "give the tensor another name");
    require(names.insert(t.name).second, where, "tensor '" + t.name + "' is listed twice",
            "give every tensor a unique name");
    const std::size_t elem = dtype_size(t.dtype);
    require(elem != 0, where, "tensor '" + t.name + "' has unknown dtype '" + t.dtype + "'",
            "use one of " + known_dtypes());
    std::size_t bytes = 0;
    require(tensor_bytes(t.shape, elem, &bytes), where,
            "tensor '" + t.name + "' with shape " + shape_string(t.shape) + " is too large", "check the shape");
    require(bytes == 0 || t.data != nullptr, where, "tensor '" + t.name + "' has no data pointer",
            "pass the tensor's data");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = t.dtype;
    e["shape"] = t.shape;
    e["data_offsets"] = nlohmann::ordered_json::array({offset, offset + bytes});
    header[t.name] = std::move(e);
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string json = header.dump();
  // The spec allows trailing spaces in the header; padding to 8 bytes aligns the data area,
  // so a reader can map every tensor without a misaligned load.
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const std::uint64_t header_len = json.size();
  char len_bytes[8];
  std::memcpy(len_bytes, &header_len, 8);  // little-endian host (static_assert above)
  out.append(len_bytes, 8);
  out += json;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i]) out.append(static_cast<const char*>(tensors[i].data), sizes[i]);
  write_file_atomically(path, out);
}

SafetensorsFile::SafetensorsFile(const std::string& path, const std::string& kind) : path_(path), kind_(kind) {
  const std::string where = kind + " '" + path + "'";
  std::error_code ec;
  require(std::filesystem::exists(path, ec), where, "no such file", "check the path");
  require(!std::filesystem::is_directory(path, ec), where, "is a directory, not a file", "check the path");
  {
    const auto size = std::filesystem::file_size(path, ec);
    require(!ec, where, "cannot read the file size (" + ec.message() + ")", "check the path and its permissions");
    std::ifstream f(path, std::ios::binary);
    require(f.good(), where, "cannot open the file for reading", "check the path and its permissions");
    bytes_.resize(static_cast<std::size_t>(size));
    f.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(size));
    require(static_cast<std::uintmax_t>(f.gcount()) == size, where,
            "read only " + std::to_string(f.gcount()) + " of " + std::to_string(size) + " bytes",
            "check the disk, or whether another program is writing the file");
  }
  const std::size_t file_size = bytes_.size();
  require(file_size >= 8, where,
          "the file is only " + std::to_string(file_size) +
              " bytes long, shorter than the 8-byte header length a safetensors file starts with",
          "the file is truncated or not a safetensors file; write it again");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes_.data(), 8);
  require(header_len <= file_size - 8, where,
          "the header length " + std::to_string(header_len) + " is larger than the " + std::to_string(file_size - 8) +
              " bytes that follow it",
          "the file is truncated or not a safetensors file; write it again");
  data_start_ = 8 + static_cast<std::size_t>(header_len);
  const std::size_t data_size = file_size - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes_.begin() + 8, bytes_.begin() + static_cast<std::ptrdiff_t>(data_start_));
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(where + ": the header is not valid JSON (" + e.what() + "); " + kCorruptFix);
  }
  require(header.is_object(), where,
          std::string("the header is a JSON ") + header.type_name() + ", not an object of tensors", kCorruptFix);

  struct Range {
    std::size_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      require(value.is_object(), where, "\"__metadata__\" is not an object", "it must map strings to strings");
      for (const auto& [mk, mv] : value.items()) {
        require(mv.is_string(), where,
                "\"__metadata__\" value of '" + mk + "' is a " + mv.type_name() + "; the format allows only strings",
                "store the value as a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + key + "'";
    require(value.is_object(), where, t + " is described by a " + std::string(value.type_name()) + ", not an object",
            kCorruptFix);
    Entry e;
    require(value.contains("dtype") && value["dtype"].is_string(), where, t + " has no \"dtype\" string", kCorruptFix);
    e.dtype = value["dtype"].get<std::string>();
    const std::size_t elem = dtype_size(e.dtype);
    require(elem != 0, where, t + " has unknown dtype '" + e.dtype + "'",
            "the format's dtypes are " + known_dtypes() + "; write the file again with one of them");
    require(value.contains("shape") && value["shape"].is_array(), where, t + " has no \"shape\" array", kCorruptFix);
    for (const auto& d : value["shape"]) {
      require(d.is_number_unsigned(), where,
              t + " has shape " + value["shape"].dump() + ", whose entries are not all non-negative integers",
              kCorruptFix);
      e.shape.push_back(d.get<std::size_t>());
    }
    const auto& off = value.contains("data_offsets") ? value["data_offsets"] : nlohmann::json();
    require(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
            t + " has no \"data_offsets\" pair [begin, end] of non-negative integers", kCorruptFix);
    e.begin = off[0].get<std::size_t>();
    e.end = off[1].get<std::size_t>();
    const std::string offsets = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    require(e.begin <= e.end, where, t + " has " + offsets + " with begin after end", kCorruptFix);
    require(e.end <= data_size, where,
            t + " has " + offsets + " beyond the data area of " + std::to_string(data_size) + " bytes",
            "the file is truncated or damaged; write it again");
    std::size_t bytes = 0;
    require(tensor_bytes(e.shape, elem, &bytes) && bytes == e.end - e.begin, where,
            t + " has " + offsets + " (" + std::to_string(e.end - e.begin) + " bytes) but dtype " + e.dtype +
                " and shape " + shape_string(e.shape) + " need " +
                (tensor_bytes(e.shape, elem, &bytes) ? std::to_string(bytes) : std::string("more than 2^64")) +
                " bytes",
            kCorruptFix);
    auto [it, inserted] = entries_.emplace(key, std::move(e));
    if (it->second.end > it->second.begin) ranges.push_back({it->second.begin, it->second.end, &it->first});
  }

  // The tensors must tile the data area exactly: no overlaps (two tensors sharing bytes) and,
  // as the specification demands, no holes (bytes that belong to no tensor).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::size_t covered = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (i > 0)
      require(r.begin >= ranges[i - 1].end, where,
              "tensors '" + *ranges[i - 1].name + "' [" + std::to_string(ranges[i - 1].begin) + ", " +
                  std::to_string(ranges[i - 1].end) + ") and '" + *r.name + "' [" + std::to_string(r.begin) + ", " +
                  std::to_string(r.end) + ") overlap",
              kCorruptFix);
    require(r.begin == covered, where,
            "bytes [" + std::to_string(covered) + ", " + std::to_string(r.begin) +
                ") of the data area belong to no tensor (the format allows no holes)",
            kCorruptFix);
    covered = r.end;
  }
  require(covered == data_size, where,
          std::to_string(data_size - covered) + " bytes at the end of the data area belong to no tensor", kCorruptFix);
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  require(it != entries_.end(), kind_ + " '" + path_ + "'", "tensor '" + name + "' is missing",
          "use a file that was written with this tensor");
  return it->second;
}

const std::uint8_t* SafetensorsFile::raw(const std::string& name) const {
  return bytes_.data() + data_start_ + entry(name).begin;
}

namespace {
template <typename T>
std::vector<T> copy_out(const std::uint8_t* src, std::size_t n) {
  std::vector<T> out(n);
  if (n) std::memcpy(out.data(), src, n * sizeof(T));  // memcpy: the data need not be aligned
  return out;
}
}  // namespace

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const Entry& e = entry(name);
  require(e.dtype == "F32", kind_ + " '" + path_ + "'",
          "tensor '" + name + "' has dtype " + e.dtype + " but F32 is needed", "save it as float32");
  return copy_out<float>(raw(name), e.numel());
}

std::vector<double> SafetensorsFile::read_f64(const std::string& name) const {
  const Entry& e = entry(name);
  if (e.dtype == "F32") {
    const auto f = read_f32(name);
    return std::vector<double>(f.begin(), f.end());  // widening is exact
  }
  require(e.dtype == "F64", kind_ + " '" + path_ + "'",
          "tensor '" + name + "' has dtype " + e.dtype + " but F64 or F32 is needed", "save it as float64 or float32");
  return copy_out<double>(raw(name), e.numel());
}

std::vector<std::int32_t> SafetensorsFile::read_i32(const std::string& name) const {
  const Entry& e = entry(name);
  require(e.dtype == "I32", kind_ + " '" + path_ + "'",
          "tensor '" + name + "' has dtype " + e.dtype + " but I32 is needed", "save it as int32");
  return copy_out<std::int32_t>(raw(name), e.numel());
}

// ---- model weights -------------------------------------------------------------------------

namespace {

constexpr const char* kLmHead = "lm_head.weight";
constexpr const char* kWte = "transformer.wte.weight";

void save_weights_impl(const std::string& path, const ParamLayout& layout, const float* params,
                       std::map<std::string, std::string> metadata) {
  std::vector<TensorRef> tensors;
  for (const auto& t : layout.tensors()) tensors.push_back({t.name, "F32", t.shape, params + t.offset});
  metadata["format"] = "pt";  // what the Python safetensors package writes for PyTorch tensors
  write_safetensors(path, tensors, metadata);
}

// `model` names what the weights are loaded into ("config 'tiny'" or "the model").
// Checks the file against `layout`, then copies the tensors of `held` (default: all of layout's).
void load_weights_impl(const std::string& path, const ParamLayout& layout, float* params, const std::string& model,
                       const ParamLayout* held = nullptr) {
  const std::string where = "weights '" + path + "'";
  const SafetensorsFile file(path, "weights");
  const auto cfg = file.metadata().find("config");
  const std::string saved_for = cfg == file.metadata().end() ? std::string()
                                                             : " (the file was saved for config '" + cfg->second + "')";
  const std::string fix = "load weights saved for the same config";
  std::set<std::string> expected;
  for (const auto& t : layout.tensors()) {
    expected.insert(t.name);
    require(file.has(t.name), where, "tensor " + t.name + " is missing, but " + model + " needs it" + saved_for, fix);
    const auto& e = file.entries().at(t.name);
    require(e.dtype == "F32", where, "tensor " + t.name + " has dtype " + e.dtype + " but scalelab weights are F32",
            "convert the weights to float32 before saving (tensor.float())");
    require(e.shape == t.shape, where,
            "tensor " + t.name + " has shape " + shape_string(e.shape) + " but " + model + " needs " +
                shape_string(t.shape) + saved_for,
            fix);
  }
  for (const auto& [name, e] : file.entries()) {
    if (expected.count(name)) continue;
    if (name == kLmHead) {
      // nanoGPT's state dict lists the tied LM head under its own name as well.
      const auto& wte = file.entries().at(kWte);
      const bool same = e.dtype == "F32" && e.shape == wte.shape &&
                        std::memcmp(file.raw(name), file.raw(kWte), wte.end - wte.begin) == 0;
      require(same, where,
              "tensor lm_head.weight differs from transformer.wte.weight, but scalelab ties the LM head "
              "to the token embedding",
              "export weights of a model with a tied LM head (nanoGPT's default)");
      continue;
    }
    require(false, where, "unexpected tensor " + name + ", which " + model + " does not have" + saved_for, fix);
  }
  for (const auto& t : (held ? *held : layout).tensors()) {
    require(file.has(t.name), where, "tensor " + t.name + " is missing, but " + model + " needs it" + saved_for, fix);
    std::memcpy(params + t.offset, file.raw(t.name), t.numel * sizeof(float));
  }
}

std::map<std::string, std::string> config_metadata(const GPTConfig& c) {
  return {{"config", c.name},
          {"vocab_size", std::to_string(c.vocab_size)},
          {"max_seq_len", std::to_string(c.max_seq_len)},
          {"channels", std::to_string(c.channels)},
          {"num_layers", std::to_string(c.num_layers)},
          {"num_heads", std::to_string(c.num_heads)}};
}

}  // namespace

void save_weights(const std::string& path, const ParamLayout& layout, const float* params) {
  save_weights_impl(path, layout, params, {});
}

void save_weights(const std::string& path, const GPTConfig& config, const float* params) {
  save_weights_impl(path, ParamLayout(config), params, config_metadata(config));
}

void load_weights(const std::string& path, const ParamLayout& layout, float* params) {
  load_weights_impl(path, layout, params, "the model");
}

void load_weights(const std::string& path, const GPTConfig& config, float* params) {
  load_weights_impl(path, ParamLayout(config), params, "config '" + config.name + "'");
}

void load_weights(const std::string& path, const GPTConfig& config, const ParamLayout& held, float* params) {
  load_weights_impl(path, ParamLayout(config), params, "config '" + config.name + "'", &held);
}

}  // namespace scalelab
