// test_comm's world: one rank, no MPI.
#include "world.hpp"

#include "comm/local_communicator.hpp"

scalelab::Communicator& scalelab_test::test_world() {
  static scalelab::LocalCommunicator world;
  return world;
}
