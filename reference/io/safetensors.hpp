// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the raw tensor bytes. scalelab uses it for model weights (nanoGPT names, so
// PyTorch can read them), training checkpoints, and the PyTorch oracle fixture.
// Reading is strict: every malformed or mismatched file gets a ConfigError naming the file and
// what is wrong, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace scalelab {

// A tensor to write: raw little-endian bytes of `dtype` ("F32", "F64", "I32", "I64", "U16", "BF16", "F16").
struct TensorRef {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  const void* data = nullptr;
};

// Writes the tensors (in the given order) and string metadata atomically (temporary + rename).
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A whole file read into memory and validated: header length within the file, JSON an object,
// known dtypes, data_offsets inside the data area and matching dtype size x shape, no overlaps.
class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;
    std::vector<std::size_t> shape;
    std::size_t begin = 0, end = 0;  // byte offsets into the data area
    std::size_t numel() const;
  };
  // `kind` starts every error message ("weights 'x.safetensors': ..."): what the file was for.
  explicit SafetensorsFile(const std::string& path, const std::string& kind = "safetensors");
  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // The entry, or a ConfigError naming the file and the missing tensor.
  const Entry& entry(const std::string& name) const;
  // A tensor's values converted to float/double; `dtype` must be F32 (or F64 for the double form).
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<double> read_f64(const std::string& name) const;
  std::vector<std::int32_t> read_i32(const std::string& name) const;
  // The tensor's bytes inside the file image (valid while this object lives; maybe unaligned).
  const std::uint8_t* raw(const std::string& name) const;

 private:
  std::string path_;
  std::string kind_;
  std::vector<std::uint8_t> bytes_;
  std::size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Model weights with the nanoGPT tensor names, F32.
void save_weights(const std::string& path, const ParamLayout& layout, const float* params);
// Strict load: the file's tensor names must equal the layout's (an extra "lm_head.weight" equal
// to the tied token embedding is accepted, as nanoGPT saves it), every dtype F32, every shape the
// layout's. Any mismatch throws ConfigError naming the tensor, the file and the fix.
void load_weights(const std::string& path, const ParamLayout& layout, float* params);
// The same for a named config: the file's metadata records the config, and error messages
// name it ("... has shape [64] but config 'tiny' needs [32]; ...").
void save_weights(const std::string& path, const GPTConfig& config, const float* params);
void load_weights(const std::string& path, const GPTConfig& config, float* params);
// The tensors of `held` (a pipeline rank's layout, stage 05: its slices' tensors by their global
// names) from a file of the whole model of `config`, checked as the whole model's load checks it;
// params is laid out by `held`. With held = ParamLayout(config) this is the load above.
void load_weights(const std::string& path, const GPTConfig& config, const ParamLayout& held, float* params);

}  // namespace scalelab
