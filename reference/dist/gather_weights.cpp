// Gathering named tensors and shards from every rank into one safetensors file (stages 05-07).
// Each rank sends rank 0 a text header (one line per tensor: name, split dimension, begin, end)
// and the values, concatenated in header order. Rank 0 places each into the whole model's flat
// buffer, marking what it has covered, checks the coverage and writes the file; the verdict is
// then broadcast so that every rank returns, or throws the same error.
#include "dist/gather_weights.hpp"

#include <cstdint>
#include <sstream>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"

namespace scalelab {

namespace {

constexpr int kTag = 7101;  // this exchange's messages

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The header of what a rank holds, and its values in the same order.
std::string encode_header(const std::vector<HeldTensor>& held) {
  std::ostringstream os;
  for (const auto& h : held)
    os << h.shard.name << ' ' << h.shard.dim << ' ' << h.shard.begin << ' ' << h.shard.end << ' ' << h.shard.numel()
       << '\n';
  return os.str();
}

// Rank 0's assembly: the whole model's buffer and which of its elements are already taken.
class Assembly {
 public:
  explicit Assembly(const GPTConfig& config)
      : layout_(config), values_(layout_.num_params(), 0.0f), taken_(layout_.num_params(), false) {}

  // Places one contribution of `rank`; returns an error message, empty when it fits.
  std::string place(int rank, const std::string& name, int dim, std::size_t begin, std::size_t end, std::size_t numel,
                    const float* data) {
    const ParamTensor* t = layout_.find_if_held(name);
    const std::string who = "rank " + std::to_string(rank) + "'s tensor " + name;
    if (!t) return who + " is not a tensor of this config";
    if (dim < 0 || static_cast<std::size_t>(dim) >= t->shape.size() || begin > end ||
        end > t->shape[static_cast<std::size_t>(dim)])
      return who + ": [" + std::to_string(begin) + ", " + std::to_string(end) + ") of dimension " +
             std::to_string(dim) + " is not inside its shape " + shape_text(t->shape);
    TensorShard s{name, t->shape, dim, begin, end};
    if (s.numel() != numel)
      return who + " has " + std::to_string(numel) + " values, but its shard " + shape_text(s.shape()) + " has " +
             std::to_string(s.numel());
    // Copy the shard into a scratch copy of the tensor, then keep only the elements not yet taken.
    std::vector<float> whole(values_.begin() + static_cast<std::ptrdiff_t>(t->offset),
                             values_.begin() + static_cast<std::ptrdiff_t>(t->offset + t->numel));
    std::vector<float> marks(t->numel, 0.0f), ones(s.numel(), 1.0f);
    copy_shard_in(s, data, whole.data());
    copy_shard_in(s, ones.data(), marks.data());
    for (std::size_t i = 0; i < t->numel; ++i) {
      if (marks[i] == 0.0f || taken_[t->offset + i]) continue;
      values_[t->offset + i] = whole[i];
      taken_[t->offset + i] = true;
    }
    return {};
  }

  // The first tensor with an element nobody sent, as an error message; empty when complete.
  std::string missing() const {
    for (const auto& t : layout_.tensors())
      for (std::size_t i = 0; i < t.numel; ++i)
        if (!taken_[t.offset + i])
          return "no rank holds element " + std::to_string(i) + " of tensor " + t.name + " " + shape_text(t.shape);
    return {};
  }
  const std::vector<float>& values() const { return values_; }

 private:
  ParamLayout layout_;
  std::vector<float> values_;
  std::vector<bool> taken_;
};

// Rank 0 parses one rank's header and places its values; returns an error message or empty.
std::string place_all(Assembly& assembly, int rank, const std::string& header, const float* values, std::size_t count) {
  std::istringstream is(header);
  std::string name;
  int dim = 0;
  std::size_t begin = 0, end = 0, numel = 0, used = 0;
  while (is >> name >> dim >> begin >> end >> numel) {
    if (numel > count - used) return "rank " + std::to_string(rank) + " sent fewer values than its tensors hold";
    std::string error = assembly.place(rank, name, dim, begin, end, numel, values + used);
    if (!error.empty()) return error;
    used += numel;
  }
  return {};
}

// Rank r > 0 sends rank 0 its header and values; rank 0 receives them.
void send_held(Communicator& comm, const std::vector<HeldTensor>& held) {
  const std::string header = encode_header(held);
  std::vector<float> values;
  for (const auto& h : held) values.insert(values.end(), h.data, h.data + h.shard.numel());
  const std::int64_t sizes[2] = {static_cast<std::int64_t>(header.size()), static_cast<std::int64_t>(values.size())};
  comm.send(sizes, 2, DataType::kInt64, 0, kTag);
  if (!header.empty()) comm.send(header.data(), header.size(), DataType::kUInt8, 0, kTag);
  if (!values.empty()) comm.send(values.data(), values.size(), DataType::kFloat32, 0, kTag);
}

std::string receive_and_place(Communicator& comm, Assembly& assembly, int rank) {
  std::int64_t sizes[2] = {0, 0};
  comm.recv(sizes, 2, DataType::kInt64, rank, kTag);
  std::string header(static_cast<std::size_t>(sizes[0]), '\0');
  std::vector<float> values(static_cast<std::size_t>(sizes[1]));
  if (!header.empty()) comm.recv(header.data(), header.size(), DataType::kUInt8, rank, kTag);
  if (!values.empty()) comm.recv(values.data(), values.size(), DataType::kFloat32, rank, kTag);
  return place_all(assembly, rank, header, values.data(), values.size());
}

// Rank 0's verdict (empty: saved) to every rank.
std::string broadcast_verdict(Communicator& comm, std::string verdict) {
  std::int64_t n = static_cast<std::int64_t>(verdict.size());
  comm.broadcast(&n, 1, 0);
  verdict.resize(static_cast<std::size_t>(n));
  if (n > 0) comm.broadcast(verdict.data(), verdict.size(), DataType::kUInt8, 0);
  return verdict;
}

}  // namespace

std::vector<HeldTensor> held_tensors(const ParamLayout& layout, const float* params) {
  std::vector<HeldTensor> held;
  for (const auto& t : layout.tensors()) held.push_back({whole_tensor(t), params + t.offset});
  return held;
}

std::vector<float> gather_whole_model(Communicator& comm, const GPTConfig& config, const std::vector<HeldTensor>& held,
                                      const std::string& what, const std::function<void(const float*)>& use) {
  std::string verdict;
  std::vector<float> whole;
  if (comm.rank() != 0) {
    send_held(comm, held);
  } else {
    // Every rank's contribution is received before any verdict, so no rank is left sending.
    Assembly assembly(config);
    for (const auto& h : held) {
      const std::string error = assembly.place(0, h.shard.name, h.shard.dim, h.shard.begin, h.shard.end,
                                               h.shard.numel(), h.data);
      if (verdict.empty()) verdict = error;
    }
    for (int r = 1; r < comm.size(); ++r) {
      const std::string error = receive_and_place(comm, assembly, r);
      if (verdict.empty()) verdict = error;
    }
    if (verdict.empty()) verdict = assembly.missing();
    if (!verdict.empty()) {
      verdict = what + ": " + verdict +
                "; every tensor of the config must be held by some rank (check the slices and shards passed in)";
    } else {
      try {
        if (use) use(assembly.values().data());
        whole = assembly.values();
      } catch (const std::exception& e) {
        verdict = e.what();
      }
    }
  }
  verdict = broadcast_verdict(comm, verdict);
  if (!verdict.empty()) throw ConfigError(verdict);
  return whole;
}

void gather_and_save_weights(Communicator& comm, const std::string& path, const GPTConfig& config,
                             const std::vector<HeldTensor>& held) {
  gather_whole_model(comm, config, held, "weights '" + path + "'",
                     [&](const float* values) { save_weights(path, config, values); });
}

void gather_and_save_checkpoint(Communicator& comm, const TrainCheckpoint& mine, const std::string& path,
                                const std::function<std::vector<HeldTensor>(const float*)>& held_of) {
  TrainCheckpoint whole = mine;
  whole.params = gather_whole_model(comm, mine.config, held_of(mine.params.data()),
                                    "checkpoint '" + path + "' (parameters)");
  whole.adam_m = gather_whole_model(comm, mine.config, held_of(mine.adam_m.data()),
                                    "checkpoint '" + path + "' (AdamW m)");
  gather_whole_model(comm, mine.config, held_of(mine.adam_v.data()), "checkpoint '" + path + "'", [&](const float* v) {
    whole.adam_v.assign(v, v + whole.params.size());
    save_checkpoint(path, whole);
  });
}

}  // namespace scalelab
