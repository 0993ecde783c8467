//===- CommunicatorMemory.cpp - NCCL's buffers per communicator -----------===//

#include "orrery/CostModel/CommunicatorMemory.h"

#include <algorithm>

namespace orrery {

double communicatorBytes(const GroupShape &g, CommunicatorUse use) {
  if (g.ranks <= 1)
    return 0;
  bool spansNodes = g.ranksPerNode < g.ranks;
  double connection = kNcclRecvBytesPerConnection + kNcclSendBytesPerConnection;
  if (use.ring) {
    int channels = spansNodes ? 8 : 16;
    return channels * connection;
  }
  int perPeer = spansNodes ? 2 : 16;
  return double(std::max(1, use.peers)) * perPeer * connection;
}

} // namespace orrery
