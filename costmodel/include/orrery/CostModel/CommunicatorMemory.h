//===- CommunicatorMemory.h - NCCL's buffers per communicator -*- C++ -*-===//
//
// The device memory NCCL holds for the communicators a rank joins, from
// its transport code (NVIDIA/nccl 2.2x; docs/memory-sources.md §4): each
// connection's receiver keeps the LL, LL128 and SIMPLE protocol buffers
// (512 KiB + 4.6875 MiB + 4 MiB, aligned up to 10 MiB, src/transport/
// p2p.cc), its sender 2 MiB. A ring collective connects every channel to
// one peer it receives from and one it sends to; send/receive and
// all-to-all connect each peer over its own channels. Channels: 16 on a
// node's NVLink (the 8-GPU H800 log of NVIDIA/nccl issue #892: "16 coll
// channels ... 16 p2p channels per peer"), 8 collective and 2 per peer
// across nodes (the 2-node log of issue #1189: "8 coll channels ... 2 p2p
// channels per peer").
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_COMMUNICATORMEMORY_H
#define ORRERY_COSTMODEL_COMMUNICATORMEMORY_H

#include "orrery/CostModel/Collective.h"

namespace orrery {

/// How a communicator's ranks talk: collectives over rings, or
/// point-to-point with `peers` peers (a pipeline's two neighbours, a
/// context-parallel ring's two, an all-to-all's ranks - 1).
struct CommunicatorUse {
  bool ring = true;
  int peers = 2;
};

/// Bytes of device memory NCCL keeps on one rank of a communicator of
/// shape `g` used as `use` (0 for a group of one rank).
double communicatorBytes(const GroupShape &g, CommunicatorUse use);

/// NCCL's bytes per connection: the receiver's and the sender's.
inline constexpr double kNcclRecvBytesPerConnection = 10.0 * (1 << 20);
inline constexpr double kNcclSendBytesPerConnection = 2.0 * (1 << 20);

} // namespace orrery

#endif // ORRERY_COSTMODEL_COMMUNICATORMEMORY_H
