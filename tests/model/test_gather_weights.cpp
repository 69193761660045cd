// Saving weights gathered from several ranks (stages 05-07): each rank contributes the tensors,
// or shards of tensors, it holds; rank 0's file must be byte for byte the file the whole model
// writes with save_weights. Runs on the test world: one rank in test_model (LocalCommunicator),
// 1-3 ranks under mpiexec in test_model_mpi. With n ranks the model is cut into n pipeline
// slices, or its tensors split n ways.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "../io/temp_files.hpp"
#include "core/error.hpp"
#include "dist/gather_weights.hpp"
#include "io/safetensors.hpp"
#include "model/gpt.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr std::uint64_t kSeed = 17;

// C = 48 and 3 layers, so that rows (3C, 4C) and columns (C, 4C) split 1, 2 or 3 ways.
GPTConfig gather_config() {
  GPTConfig c;
  c.name = "gather";
  c.vocab_size = 60;
  c.max_seq_len = 12;
  c.channels = 48;
  c.num_layers = 3;
  c.num_heads = 4;
  return c;
}

// Every rank makes the same whole model (same seed); rank 0 also writes its file as the expected
// bytes. Returns rank 0's verdict on the gathered file: an empty string when the bytes match.
struct Fixture {
  GPTConfig config = gather_config();
  MemoryTracker tracker;
  GPT whole{config, &tracker};
  TempDir dir;
  Fixture() { whole.init_weights(kSeed); }

  std::string compare_on_rank0(Communicator& comm, const std::string& gathered) {
    if (comm.rank() != 0) return {};
    const std::string expected = dir.file("whole.safetensors");
    save_weights(expected, config, whole.params());
    const std::string want = read_bytes(expected), got = read_bytes(gathered);
    if (got == want) return {};
    std::size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    return "the gathered file (" + std::to_string(got.size()) + " bytes) differs from the whole model's (" +
           std::to_string(want.size()) + " bytes) first at byte " + std::to_string(i);
  }
};

// Layer counts of n pipeline slices of 3 layers.
std::vector<int> slice_lengths(int n) {
  if (n == 1) return {3};
  if (n == 2) return {1, 2};
  return {1, 1, 1};
}

}  // namespace

TEST_CASE("gather-save: pipeline slices, one per rank, give the whole model's file byte for byte") {
  Communicator& comm = test_world();
  Fixture f;
  INFO(where(comm));
  REQUIRE(comm.size() <= 3);
  const std::vector<int> lengths = slice_lengths(comm.size());
  int first = 0;
  for (int r = 0; r < comm.rank(); ++r) first += lengths[static_cast<std::size_t>(r)];
  const ModelSlice slice = ModelSlice::layers(f.config, first, lengths[static_cast<std::size_t>(comm.rank())]);
  GPT mine(f.config, &f.tracker, slice);
  mine.init_weights(kSeed);  // the whole model's values for the tensors it holds (also the wte copy)
  const std::string path = f.dir.file("gathered.safetensors");
  gather_and_save_weights(comm, path, f.config, held_tensors(mine.layout(), mine.params()));
  CHECK(f.compare_on_rank0(comm, path) == "");
}

TEST_CASE("gather-save: tensors split by rows and columns across the ranks give the whole model's file") {
  Communicator& comm = test_world();
  Fixture f;
  INFO(where(comm));
  const ParamLayout& layout = f.whole.layout();
  // c_attn.weight (3C, C) split by rows (column-parallel), mlp.c_proj.weight (C, 4C) by columns
  // (row-parallel), ln_f.bias (C) by rows; rank 0 holds every other tensor whole.
  const std::vector<std::string> split_rows = {"transformer.h.1.attn.c_attn.weight", "transformer.ln_f.bias"};
  const std::string split_cols = "transformer.h.2.mlp.c_proj.weight";
  std::vector<std::vector<float>> parts;
  parts.reserve(layout.tensors().size());  // no reallocation: `held` points into the parts
  std::vector<HeldTensor> held;
  for (const auto& t : layout.tensors()) {
    const bool rows = std::find(split_rows.begin(), split_rows.end(), t.name) != split_rows.end();
    if (!rows && t.name != split_cols) {
      if (comm.rank() == 0) held.push_back({whole_tensor(t), f.whole.params() + t.offset});
      continue;
    }
    const TensorShard s = rows ? shard_rows(t, comm.rank(), comm.size()) : shard_cols(t, comm.rank(), comm.size());
    parts.emplace_back(s.numel());
    copy_shard_out(s, f.whole.params() + t.offset, parts.back().data());
    held.push_back({s, parts.back().data()});
  }
  const std::string path = f.dir.file("gathered.safetensors");
  gather_and_save_weights(comm, path, f.config, held);
  CHECK(f.compare_on_rank0(comm, path) == "");
}

TEST_CASE("gather-save: a tensor nobody holds fails on every rank, naming it") {
  Communicator& comm = test_world();
  Fixture f;
  INFO(where(comm));
  std::vector<HeldTensor> held = held_tensors(f.whole.layout(), f.whole.params());
  held.pop_back();  // ln_f.bias, on every rank
  const std::string path = f.dir.file("gathered.safetensors");
  CHECK_THROWS_WITH(gather_and_save_weights(comm, path, f.config, held),
                    Catch::Contains("no rank holds element 0 of tensor transformer.ln_f.bias [48]"));
  std::vector<HeldTensor> wrong = held_tensors(f.whole.layout(), f.whole.params());
  wrong[0].shard.name = "lm_head.bias";
  CHECK_THROWS_WITH(gather_and_save_weights(comm, path, f.config, wrong),
                    Catch::Contains("rank 0's tensor lm_head.bias is not a tensor of this config"));
}
