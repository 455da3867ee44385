// A communicator for projecting tensor-parallel step times from one device: it plays rank `rank` of
// a group of `world_size` that does not exist. Every collective returns at once and leaves its
// tensor as this rank's local value (AllReduceSum does not sum, Broadcast does not overwrite,
// AllGather repeats this rank's input); AllReduceSum calls and their bytes are counted in Stats().
// The numbers a model computes with it are therefore wrong; its shapes, kernels and the bytes it
// would all-reduce are the real ones, which is what the step benchmarks' --tp N measures (the
// per-rank compute time, and the all-reduce traffic to add for a projected step time).
//
// Never used to serve. Thread-compatible (one caller at a time, as every Communicator).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace ditserve::comm {

std::unique_ptr<Communicator> MakeProjectionCommunicator(int rank, int world_size);

}  // namespace ditserve::comm
