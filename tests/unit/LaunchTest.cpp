//===- LaunchTest.cpp - rank and world from the launchers' variables ------===//
#include "orrery/Runtime/Launch.h"
#if ORRERY_HAVE_CUDA_BACKEND
#include "../../runtime/lib/CudaLibraries.h"
#endif

#include <map>
#include <string>

#include <gtest/gtest.h>

using namespace orrery;

namespace {

llvm::Expected<LaunchEnv> from(const std::map<std::string, std::string> &vars) {
  return launchFromEnvironment([&](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error(llvm::Expected<LaunchEnv> e) {
  return e ? "" : llvm::toString(e.takeError());
}

TEST(Launch, TorchrunMpirunAndSlurmVariables) {
  auto t = from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                 {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29600"}});
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->launcher, "torchrun");
  EXPECT_EQ(t->rank, 3);
  EXPECT_EQ(t->worldSize, 8);
  EXPECT_EQ(t->localRank, 1);
  EXPECT_EQ(t->masterAddr, "10.0.0.7");
  EXPECT_EQ(t->masterPort, 29600);
  auto m = from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  ASSERT_TRUE(bool(m));
  EXPECT_EQ(m->launcher, "mpirun");
  EXPECT_EQ(m->rank, 1);
  EXPECT_EQ(m->masterAddr, "127.0.0.1");
  EXPECT_EQ(m->masterPort, 29500);
  auto s = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}});
  ASSERT_TRUE(bool(s));
  EXPECT_EQ(s->launcher, "srun");
  EXPECT_EQ(s->localRank, 5); // no SLURM_LOCALID: the rank
}

TEST(Launch, BadVariablesNameTheVariable) {
  EXPECT_NE(error(from({})).find("no launcher"), std::string::npos);
  EXPECT_EQ(error(from({{"RANK", "0"}})), "WORLD_SIZE is not set");
  EXPECT_EQ(error(from({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
            "RANK=2: expected an integer from 0 to 1");
  EXPECT_EQ(error(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
            "RANK=x: expected an integer from 0 to 1");
  EXPECT_EQ(error(from({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}})),
            "WORLD_SIZE=99999999999: expected an integer from 1 to 1048576");
  EXPECT_EQ(error(from({{"RANK", "0"}, {"WORLD_SIZE", "2"},
                        {"MASTER_PORT", "70000"}})),
            "MASTER_PORT=70000: expected an integer from 1 to 65535");
}

} // namespace

#if ORRERY_HAVE_CUDA_BACKEND
// cuBLASLt and NCCL are loaded on the CUDA backend's first use, not
// linked: every function the backend calls is found in the libraries the
// build found (no GPU needed to load them).
TEST(CudaLibraries, EveryFunctionTheBackendCallsLoads) {
  llvm::Error e = orrery::runtime::loadCudaLibraries();
  ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  const orrery::runtime::CudaLibraries &lib = orrery::runtime::cuda();
#define ORRERY_EXPECT_LOADED(name) EXPECT_NE(lib.name, nullptr) << #name;
  ORRERY_CUBLASLT_FUNCTIONS(ORRERY_EXPECT_LOADED)
  ORRERY_NCCL_FUNCTIONS(ORRERY_EXPECT_LOADED)
#undef ORRERY_EXPECT_LOADED
  // A call through the table: NCCL names its own error codes.
  EXPECT_STRNE(lib.ncclGetErrorString(ncclInvalidArgument), "");
}
#endif
