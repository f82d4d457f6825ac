// LaunchFromEnv: torchrun's and mpirun's variables to rank, size and
// rendezvous, against values written out by hand.
#include "tools/zen/launch_env.h"

#include <gtest/gtest.h>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

TEST(LaunchFromEnv, NothingWithoutALauncher) {
  EXPECT_FALSE(LaunchFromEnv({}).has_value());
  EXPECT_FALSE(LaunchFromEnv({{"RANK", "1"}}).has_value());  // WORLD_SIZE missing
}

TEST(LaunchFromEnv, Torchrun) {
  const auto l = LaunchFromEnv({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "abc/1"},
                                {"TORCHELASTIC_RESTART_COUNT", "2"}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 3);
  EXPECT_EQ(l->size, 4);
  EXPECT_EQ(l->rendezvous, "tcp://10.0.0.1:29501");
  EXPECT_EQ(l->job, "torchelastic-abc-1-2");
  EXPECT_EQ(l->launcher, "torchrun");
}

TEST(LaunchFromEnv, ZenRendezvousOverrides) {
  const auto l = LaunchFromEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"ZEN_RENDEZVOUS", "file:/shared/x"}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rendezvous, "file:/shared/x");
  EXPECT_EQ(l->job, "torchelastic-none-0");
}

TEST(LaunchFromEnv, Mpirun) {
  const auto l = LaunchFromEnv({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"OMPI_MCA_ess_base_jobid", "123"}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 1);
  EXPECT_EQ(l->size, 2);
  EXPECT_EQ(l->rendezvous, "mpi://");
  EXPECT_EQ(l->job, "mpi-123");
  EXPECT_EQ(l->launcher, "mpirun");
  const auto h = LaunchFromEnv({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}});
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->size, 3);
}

TEST(LaunchFromEnv, MalformedValuesNameTheVariable) {
  const std::map<std::string, std::string> bad[] = {
      {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "x"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}},  // no MASTER_ADDR / MASTER_PORT / ZEN_RENDEZVOUS
      {{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}};
  for (const auto& env : bad) EXPECT_THROW(LaunchFromEnv(env), InvalidArgument);
}

}  // namespace
}  // namespace zen::cli
