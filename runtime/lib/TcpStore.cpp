//===- TcpStore.cpp - the rendezvous key-value store over TCP -------------===//
//
// Messages: a one-byte op, then length-prefixed strings (uint32, host
// order: both ends are this program). H rank: hello; S key value: set;
// G key: get, answered with a found byte and the value; B: goodbye.
//
//===----------------------------------------------------------------------===//
#include "TcpStore.h"

#include <nlohmann/json.hpp>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace orrery {
namespace runtime {

static bool writeAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) {
      if (k < 0 && errno == EINTR)
        continue;
      return false;
    }
    c += k;
    n -= size_t(k);
  }
  return true;
}

static bool readAll(int fd, void *p, size_t n) {
  char *c = static_cast<char *>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR)
        continue;
      return false;
    }
    c += k;
    n -= size_t(k);
  }
  return true;
}

static bool writeString(int fd, const char *p, size_t n) {
  uint32_t len = uint32_t(n);
  return writeAll(fd, &len, sizeof len) && writeAll(fd, p, n);
}

static bool readString(int fd, std::vector<char> &out) {
  uint32_t len = 0;
  if (!readAll(fd, &len, sizeof len) || len > (1u << 30))
    return false;
  out.resize(len);
  return readAll(fd, out.data(), len);
}

TcpStoreServer::TcpStoreServer(int port) {
  listenFd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listenFd < 0)
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  if (::bind(listenFd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) < 0 ||
      ::listen(listenFd, 1024) < 0) {
    std::string why = std::strerror(errno);
    ::close(listenFd);
    throw std::runtime_error("MASTER_PORT " + std::to_string(port) +
                             ": cannot listen: " + why);
  }
  acceptor = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping = true;
  ::shutdown(listenFd, SHUT_RDWR);
  ::close(listenFd);
  if (acceptor.joinable())
    acceptor.join();
  for (std::thread &t : clients)
    t.detach(); // each ends when its client closes
}

void TcpStoreServer::serve() {
  while (!stopping) {
    int fd = ::accept(listenFd, nullptr, nullptr);
    if (fd < 0) {
      if (stopping)
        return;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    clients.emplace_back([this, fd] { client(fd); });
  }
}

void TcpStoreServer::client(int fd) {
  int rank = -1;
  bool bye = false;
  for (;;) {
    char op = 0;
    if (!readAll(fd, &op, 1))
      break;
    std::vector<char> key, value;
    if (op == 'H') {
      if (!readAll(fd, &rank, sizeof rank))
        break;
    } else if (op == 'S') {
      if (!readString(fd, key) || !readString(fd, value))
        break;
      std::lock_guard<std::mutex> lock(mu);
      data[std::string(key.begin(), key.end())] = value;
    } else if (op == 'G') {
      if (!readString(fd, key))
        break;
      std::vector<char> found;
      char have = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = data.find(std::string(key.begin(), key.end()));
        if (it != data.end()) {
          have = 1;
          found = it->second;
        }
      }
      if (!writeAll(fd, &have, 1) ||
          (have && !writeString(fd, found.data(), found.size())))
        break;
    } else if (op == 'B') {
      bye = true;
    } else {
      break;
    }
  }
  ::close(fd);
  if (!bye && rank >= 0 && !stopping) {
    std::lock_guard<std::mutex> lock(mu);
    std::string r = std::to_string(rank);
    data.emplace(kLostRankKey, std::vector<char>(r.begin(), r.end()));
  }
}

TcpStore::TcpStore(const std::string &host, int port, int rank,
                   std::chrono::milliseconds timeout)
    : timeout(timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc =
        ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc == 0) {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        break;
      }
      why = std::strerror(errno);
      if (fd >= 0)
        ::close(fd);
      fd = -1;
      ::freeaddrinfo(res);
    } else {
      why = ::gai_strerror(rc);
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("cannot reach the rendezvous at " + host + ":" +
                               std::to_string(port) +
                               " (MASTER_ADDR:"
                               "MASTER_PORT): " +
                               why);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char op = 'H';
  if (!writeAll(fd, &op, 1) || !writeAll(fd, &rank, sizeof rank))
    throw std::runtime_error("the rendezvous closed the connection");
}

TcpStore::~TcpStore() {
  if (fd >= 0)
    ::close(fd);
}

void TcpStore::goodbye() {
  std::lock_guard<std::mutex> lock(mu);
  char op = 'B';
  writeAll(fd, &op, 1);
}

void TcpStore::set(const std::string &key, const std::vector<char> &value) {
  std::lock_guard<std::mutex> lock(mu);
  char op = 'S';
  if (!writeAll(fd, &op, 1) || !writeString(fd, key.data(), key.size()) ||
      !writeString(fd, value.data(), value.size()))
    throw std::runtime_error("lost the rendezvous (rank 0's store)");
}

bool TcpStore::tryGet(const std::string &key, std::vector<char> &value) {
  std::lock_guard<std::mutex> lock(mu);
  char op = 'G', have = 0;
  if (!writeAll(fd, &op, 1) || !writeString(fd, key.data(), key.size()) ||
      !readAll(fd, &have, 1) || (have && !readString(fd, value)))
    throw std::runtime_error("lost the rendezvous (rank 0's store)");
  return have;
}

std::vector<char> TcpStore::get(const std::string &key) {
  wait({key}, timeout);
  std::vector<char> v;
  tryGet(key, v);
  return v;
}

void TcpStore::wait(const std::vector<std::string> &keys) {
  wait(keys, timeout);
}

void TcpStore::wait(const std::vector<std::string> &keys,
                    const std::chrono::milliseconds &limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<char> v;
  for (const std::string &k : keys)
    while (!tryGet(k, v)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("timed out waiting for '" + k +
                                 "' at the rendezvous");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

Rendezvous::Rendezvous(int rank, const std::string &masterAddr, int masterPort,
                       std::chrono::milliseconds timeout)
    : timeout(timeout) {
  if (rank == 0)
    server = std::make_unique<TcpStoreServer>(masterPort);
  store = std::make_unique<TcpStore>(masterAddr, masterPort, rank, timeout);
  gloo::transport::tcp::attr attr;
  if (const char *host = std::getenv("ORRERY_GLOO_HOST"))
    attr.hostname = host;
  else if (masterAddr == "127.0.0.1" || masterAddr == "localhost")
    attr.hostname = "127.0.0.1";
  device = gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> Rendezvous::connect(const std::string &prefix,
                                                   int rank, int size) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(timeout);
  gloo::rendezvous::PrefixStore prefixed(prefix, *store);
  ctx->connectFullMesh(prefixed, device);
  return ctx;
}

} // namespace runtime

RankMeasurement measurementOf(const Program &prog, int rank) {
  RankMeasurement me;
  me.rank = rank;
  me.device = prog.device;
  me.stage = prog.stage;
  me.replicaGroup = prog.replicaGroup;
  me.predictedPeakBytes = prog.predictedPeakBytes;
  for (const Instruction &in : prog.code)
    if (in.stream == StreamKind::Compute && !in.span.empty()) {
      if (in.span[0] == 'F')
        me.predictedForwardS += in.predictedS;
      else if (in.span[0] == 'B')
        me.predictedBackwardS += in.predictedS;
    }
  me.kindS.assign(kInstrKinds, 0.0);
  return me;
}

namespace runtime {

RunResult exchangeMeasurements(TcpStore &store, const ProgramSet &set,
                               const RankMeasurement &me) {
  nlohmann::json j = {{"rank", me.rank},
                      {"device", me.device},
                      {"stage", me.stage},
                      {"replica_group", me.replicaGroup},
                      {"predicted_peak_bytes", me.predictedPeakBytes},
                      {"predicted_forward_s", me.predictedForwardS},
                      {"predicted_backward_s", me.predictedBackwardS},
                      {"step_s", me.stepS},
                      {"kind_s", me.kindS},
                      {"forward_s", me.forwardS},
                      {"backward_s", me.backwardS},
                      {"tail_s", me.stepTailS},
                      {"peak_bytes", me.peakMemoryBytes}};
  nlohmann::json spans = nlohmann::json::array();
  for (const MeasuredSpan &s : me.spans)
    spans.push_back({s.name, s.stream, s.startS, s.durationS});
  j["spans"] = spans;
  std::string text = j.dump();
  store.set("result/" + std::to_string(me.rank),
            std::vector<char>(text.begin(), text.end()));
  RunResult result;
  result.predictedStepS = set.predictedStepS;
  for (int r = 0; r < set.worldSize; ++r) {
    std::vector<char> v = store.get("result/" + std::to_string(r));
    nlohmann::json x = nlohmann::json::parse(v.begin(), v.end());
    RankMeasurement m;
    m.rank = r;
    m.device = x.at("device").get<std::string>();
    m.stage = x.at("stage");
    m.replicaGroup = x.at("replica_group");
    m.predictedPeakBytes = x.at("predicted_peak_bytes");
    m.predictedForwardS = x.at("predicted_forward_s");
    m.predictedBackwardS = x.at("predicted_backward_s");
    m.stepS = x.at("step_s").get<std::vector<double>>();
    m.kindS = x.at("kind_s").get<std::vector<double>>();
    m.forwardS = x.at("forward_s");
    m.backwardS = x.at("backward_s");
    m.stepTailS = x.at("tail_s");
    m.peakMemoryBytes = x.at("peak_bytes");
    for (const auto &s : x.at("spans"))
      m.spans.push_back({s.at(0), s.at(1), s.at(2), s.at(3)});
    result.ranks.push_back(std::move(m));
  }
  return result;
}

llvm::Error checkLaunch(const ProgramSet &set, const LaunchEnv &env) {
  auto err = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  if (env.worldSize != set.worldSize)
    return err("the launcher started " + std::to_string(env.worldSize) +
               " ranks; the plan has " + std::to_string(set.worldSize));
  if (env.rank < 0 || env.rank >= set.worldSize)
    return err("rank " + std::to_string(env.rank) + " is not in the plan");
  // A rank that lowered only itself and its peers checks what it can see;
  // a whole set (orrery lower --json) is checked whole.
  return set.whole() ? checkPrograms(set) : checkRank(set, env.rank);
}

} // namespace runtime
} // namespace orrery
