//===- TcpStore.h - the rendezvous key-value store over TCP ---------------===//
//
// Rank 0 serves it at MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) is a
// client: Gloo's rendezvous (gloo::rendezvous::Store) and the runtime's own
// keys. A client that disconnects without saying goodbye is a lost rank:
// the server records it under kLostRankKey, which every rank's watchdog
// reads.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_LIB_TCPSTORE_H
#define ORRERY_RUNTIME_LIB_TCPSTORE_H

#include "orrery/Runtime/Runtime.h"

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace orrery {
namespace runtime {

constexpr const char *kLostRankKey = "orrery/lost-rank";

class TcpStoreServer {
public:
  /// Listens on `port` (all interfaces); throws std::runtime_error.
  explicit TcpStoreServer(int port);
  ~TcpStoreServer();

private:
  void serve();
  void client(int fd);
  int listenFd = -1;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::map<std::string, std::vector<char>> data;
  std::thread acceptor;
  std::vector<std::thread> clients;
};

class TcpStore : public gloo::rendezvous::Store {
public:
  /// Connects (retrying until `timeout`) and says which rank it is.
  TcpStore(const std::string &host, int port, int rank,
           std::chrono::milliseconds timeout);
  ~TcpStore() override;

  void set(const std::string &key, const std::vector<char> &value) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;
  /// The value if it is there; throws when the server is gone.
  bool tryGet(const std::string &key, std::vector<char> &value);
  /// Tells the server this rank leaves on purpose.
  void goodbye();

private:
  int fd = -1;
  std::mutex mu;
  std::chrono::milliseconds timeout;
};

/// A rank's way into the others: the rendezvous (served by rank 0), Gloo's
/// TCP device, and contexts over any group of ranks made from them.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::chrono::milliseconds timeout;
  /// Throws std::runtime_error.
  Rendezvous(int rank, const std::string &masterAddr, int masterPort,
             std::chrono::milliseconds timeout);
  /// A context of `size` ranks, this one `rank` of them, under `prefix`
  /// (every member calls it with the same prefix).
  std::shared_ptr<gloo::Context> connect(const std::string &prefix, int rank,
                                         int size);
};

/// Every rank's measurement, in rank order, through the rendezvous (each
/// rank publishes its own and reads the others'); throws.
RunResult exchangeMeasurements(TcpStore &store, const ProgramSet &set,
                               const RankMeasurement &mine);

/// The launch against the programs: the world size, the rank, and the
/// static check of the set (checkPrograms).
llvm::Error checkLaunch(const ProgramSet &set, const LaunchEnv &env);

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_TCPSTORE_H
