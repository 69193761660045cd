// The resume check every parallel stage makes: a run of o.steps steps straight, and the same run
// saved after half of them and resumed from the file for the rest. A test then compares the two
// (bit for bit: resuming must not change a single value).
#pragma once

#include <memory>
#include <string>

#include "core/memory.hpp"
#include "train/parallel_strategy.hpp"
#include "train/train_options.hpp"
#include "train/trainer.hpp"

namespace scalelab_test {

struct ResumeRuns {
  scalelab::MemoryTracker straight_memory, first_memory, resumed_memory;
  std::unique_ptr<scalelab::Trainer> straight, resumed;
};

// Collective over the ranks the strategy factory uses (every rank calls it alike).
inline std::unique_ptr<ResumeRuns> run_straight_and_resumed(const scalelab::TrainOptions& o, const std::string& state,
                                                            const scalelab::StrategyFactory& strategies) {
  auto r = std::make_unique<ResumeRuns>();
  r->straight = std::make_unique<scalelab::Trainer>(o, &r->straight_memory, scalelab::TrainModelFactory{}, strategies);
  for (int i = 0; i < o.steps; ++i) r->straight->step();
  {
    scalelab::Trainer first(o, &r->first_memory, {}, strategies);
    for (int i = 0; i < o.steps / 2; ++i) first.step();
    first.save_checkpoint(state);
  }
  scalelab::TrainOptions again = o;
  again.resume = state;
  r->resumed = std::make_unique<scalelab::Trainer>(again, &r->resumed_memory, scalelab::TrainModelFactory{},
                                                   strategies);
  for (int i = o.steps / 2; i < o.steps; ++i) r->resumed->step();
  return r;
}

}  // namespace scalelab_test
