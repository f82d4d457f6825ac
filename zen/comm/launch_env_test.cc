// The one launcher mapping (launch_env.h): torchrun, Open MPI, MPICH / PMI
// and Slurm variables to rank, size, local rank, job id and rendezvous,
// against values written out by hand.
#include "zen/comm/launch_env.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "zen/comm/rendezvous_url.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Env = std::map<std::string, std::string>;

TEST(LaunchEnvTest, TorchrunVariablesMapToZensTcpStoreAndAGenerationJob) {
  const Env env = {{"RANK", "3"},
                   {"WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "10.1.2.3"},
                   {"MASTER_PORT", "29500"},
                   {"TORCHELASTIC_RUN_ID", "my/run"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"},
                   {"OMPI_COMM_WORLD_RANK", "0"}};  // torchrun wins
  const auto info = RendezvousFromEnv(env);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->rendezvous, "tcp://10.1.2.3:29501");
  EXPECT_EQ(info->job, "torchelastic-my_run-2");
  EXPECT_EQ(info->launcher, "torchrun");
  ParseRendezvousUrl(info->rendezvous + "?job=" + info->job);  // a valid URL and job id
  Env next = env;
  next["TORCHELASTIC_RESTART_COUNT"] = "3";
  EXPECT_NE(RendezvousFromEnv(next)->job, info->job);  // a new generation, new keys
}

// The TCP store's per-job secret: ZEN_STORE_SECRET when set,
// else derived from torchrun's variables (so a worker of another run or
// restart brings another one); at most 256 bytes.
TEST(LaunchEnvTest, TheStoreSecretComesFromTheLaunchEnvironment) {
  Env env = {{"RANK", "0"},           {"WORLD_SIZE", "2"},          {"MASTER_ADDR", "h"},
             {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "r1"}};
  const std::string derived = RendezvousFromEnv(env)->secret;
  EXPECT_EQ(derived, "torchrun/r1/0/h:29500");
  Env restarted = env;
  restarted["TORCHELASTIC_RESTART_COUNT"] = "1";
  EXPECT_NE(RendezvousFromEnv(restarted)->secret, derived);
  Env other_port = env;
  other_port["MASTER_PORT"] = "29600";
  EXPECT_NE(RendezvousFromEnv(other_port)->secret, derived);
  env["ZEN_STORE_SECRET"] = "0123456789abcdef";
  EXPECT_EQ(RendezvousFromEnv(env)->secret, "0123456789abcdef");
  env["ZEN_STORE_SECRET"] = std::string(257, 'x');
  EXPECT_THROW(RendezvousFromEnv(env), InvalidArgument);
}

TEST(LaunchEnvTest, MpirunVariables) {
  const auto info = RendezvousFromEnv(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMIX_NAMESPACE", "prterun-x-1@1"}});
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->size, 3);
  EXPECT_EQ(info->rendezvous, "mpi://");
  EXPECT_EQ(info->job, "mpi-prterun-x-1_1");
  EXPECT_EQ(info->launcher, "mpirun");
  const auto over = RendezvousFromEnv({{"OMPI_COMM_WORLD_RANK", "0"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"ZEN_RENDEZVOUS", "file:/shared/d"}});
  EXPECT_EQ(over->rendezvous, "file:/shared/d");
}

TEST(LaunchEnvTest, EnvWithoutALauncherIsNulloptAndBadValuesAreNamed) {
  EXPECT_FALSE(RendezvousFromEnv({}));
  // RANK and WORLD_SIZE alone (no MASTER_ADDR/MASTER_PORT, no
  // ZEN_RENDEZVOUS) are not torchrun's.
  EXPECT_FALSE(RendezvousFromEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  EXPECT_FALSE(RendezvousFromEnv({{"RANK", "1"}}));  // WORLD_SIZE missing
  const Env base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", "2"}, {"RANK", "-1"}, {"WORLD_SIZE", "0"}, {"WORLD_SIZE", "x"},
           {"MASTER_PORT", "65535"}, {"MASTER_PORT", "0"}, {"MASTER_ADDR", ""},
           {"TORCHELASTIC_RESTART_COUNT", "1e3"}, {"ZEN_RENDEZVOUS", "nope://"}}) {
    Env env = base;
    env[k] = v;
    try {
      RendezvousFromEnv(env);
      ADD_FAILURE() << k << "=" << v << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(k == "ZEN_RENDEZVOUS" ? "nope://" : k),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LaunchEnvTest, TorchrunLocalRankAndZenRendezvousWithoutMasterAddress) {
  const auto l = RendezvousFromEnv({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                    {"ZEN_RENDEZVOUS", "file:/shared/x"}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 5);
  EXPECT_EQ(l->local_rank, 1);
  EXPECT_EQ(l->rendezvous, "file:/shared/x");
  EXPECT_EQ(l->job, "torchelastic-none-0");
  EXPECT_EQ(l->launcher, "torchrun");
}

TEST(LaunchEnvTest, MpichPmiVariables) {
  const auto h = RendezvousFromEnv({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"},
                                    {"PMI_JOBID", "77:x"}});
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->rank, 2);
  EXPECT_EQ(h->size, 3);
  EXPECT_EQ(h->local_rank, 0);
  EXPECT_EQ(h->rendezvous, "mpi://");
  EXPECT_EQ(h->job, "mpi-77_x");
  EXPECT_EQ(h->launcher, "mpirun");
  // Open MPI's variables win over PMI's (Open MPI may set both).
  const auto o = RendezvousFromEnv({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMI_RANK", "0"},
                                    {"PMI_SIZE", "3"}});
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->size, 2);
  EXPECT_EQ(o->local_rank, 1);
}

TEST(LaunchEnvTest, SlurmVariables) {
  const auto s = RendezvousFromEnv({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"},
                                    {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "4242"},
                                    {"SLURM_STEP_ID", "0"}});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->size, 4);
  EXPECT_EQ(s->local_rank, 1);
  EXPECT_EQ(s->job, "slurm-4242.0");
  EXPECT_EQ(s->launcher, "slurm");
  EXPECT_EQ(s->rendezvous, "mpi://");
  // torchrun started by srun: torchrun's variables win.
  const auto t = RendezvousFromEnv({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"},
                                    {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                    {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t->launcher, "torchrun");
  EXPECT_EQ(t->size, 2);
}

// One rule for every launcher: sizes up to 2^24, job ids of [A-Za-z0-9._-]
// with '_' for anything else, at most 128 characters, the restart count
// never cut off.
TEST(LaunchEnvTest, OneJobIdAndWorldSizeRuleForEveryLauncher) {
  EXPECT_EQ(CleanJobId("a/b c@d-e.f_g"), "a_b_c_d-e.f_g");
  EXPECT_EQ(CleanJobId(std::string(300, 'x')).size(), 128u);
  const std::string long_run(300, 'r');
  const auto t = RendezvousFromEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                    {"MASTER_PORT", "1"}, {"TORCHELASTIC_RUN_ID", long_run},
                                    {"TORCHELASTIC_RESTART_COUNT", "17"}});
  EXPECT_EQ(t->job.size(), 128u);
  EXPECT_EQ(t->job.substr(t->job.size() - 3), "-17");
  EXPECT_TRUE(ValidJobId(t->job));
  const auto m = RendezvousFromEnv({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_MCA_ess_base_jobid", long_run + "/x"}});
  EXPECT_EQ(m->job.size(), 128u);
  EXPECT_TRUE(ValidJobId(m->job));
  const std::string max = std::to_string(kMaxLaunchWorld);
  const std::string over = std::to_string(kMaxLaunchWorld + 1);
  for (const auto& [rank, size] : std::vector<std::pair<const char*, const char*>>{
           {"RANK", "WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
           {"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}}) {
    Env env = {{rank, "0"}, {size, max}, {"ZEN_RENDEZVOUS", "file:/d"}};
    EXPECT_EQ(RendezvousFromEnv(env)->size, kMaxLaunchWorld) << size;
    env[size] = over;
    EXPECT_THROW(RendezvousFromEnv(env), InvalidArgument) << size;
  }
}

TEST(LaunchEnvTest, MalformedValuesOfEveryLauncherAreInvalidArguments) {
  const Env bad[] = {
      {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "x"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"MASTER_ADDR", "h"},
       {"MASTER_PORT", "1"}},
      {{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}},
      {{"SLURM_PROCID", ""}, {"SLURM_NTASKS", "2"}}};
  for (const auto& env : bad) EXPECT_THROW(RendezvousFromEnv(env), InvalidArgument);
}

}  // namespace
}  // namespace zen
