// Stage 05 over NCCL: a schedule's messages on a backend without tags whose sends complete only
// when the receiver takes them.
//
// Over MPI the executor (dist/pipeline_executor.hpp) relies on two things that NCCL's
// point-to-point does not give: tags, so that an activation and a gradient travelling between
// the same two ranks cannot be taken for one another, and sends that never block (MPI buffers a
// small message, and an isend returns at once). NCCL matches the k-th send from rank a to rank b
// with the k-th receive on b from a, whatever they carry, and a send finishes only while the
// receiver's matching receive runs. On top of that, the NCCL communicator (kernels/comm/
// nccl_communicator.hpp) queues isends and launches them with the next receive, as one group
// that the host then waits for as a whole. So the executor's rank posts, over NCCL:
//
//   at each receive    one group: the sends queued since the last group, then the receive;
//                      the host waits until the whole group has finished
//   at the step's end  one group of the sends still queued
//
// and a group finishes once every one of its operations has met its partner, which happens
// while both ranks run the groups that hold them. check_rendezvous runs every rank's groups in
// that model and throws if two ranks' k-th messages between them differ, or if the groups can
// no longer move (a cycle of ranks each waiting on a group the next has not reached). The
// simulator (schedule/pipeline_sim.hpp) checks the same lists under MPI's rules.
//
// afab, 1f1b and zb-h1 run over NCCL as built, and so does interleaved with m = p. With m > p,
// interleaved's warm-up sends activations round the ring (the last rank feeds rank 0's next
// chunk) ahead of the receives that take them, and two ranks end up each in a send whose receive
// the other posts in a later group. rendezvous_schedules repairs that by delaying such sends into
// the next group, which is what scalelab train --backend nccl runs.
#pragma once

#include <vector>

#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// Throws Error naming the two mismatched messages, or each blocked rank and the group it waits
// in; returns the number of groups every rank posted in all.
int check_rendezvous(const PipelineShape& shape, const std::vector<RankSchedule>& schedules);

// The lists of build_schedules with sends delayed until NCCL can run them: replayed, and while
// some group is stuck on a send whose receive the peer posts in a later group, that send moves
// past its group's receive, into the next group (a send may always go later: after the compute
// that produced it, in its order). The compute order, and so the activations held, do not
// change. Throws the replay's Error if no send can move.
std::vector<RankSchedule> rendezvous_schedules(const PipelineShape& shape);

}  // namespace scalelab
