// Dispatch from (collective, algorithm) to the builder, and names for logs.
#include "collectives/schedule.hpp"

namespace accord {

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kRecvReduce: return "recv-reduce";
    case StepKind::kRecvReduceSend: return "recv-reduce-send";
    case StepKind::kRecvReduceCopySend: return "recv-reduce-copy-send";
    case StepKind::kRecvCopySend: return "recv-copy-send";
    case StepKind::kCopy: return "copy";
    case StepKind::kReduceAll: return "reduce-all";
  }
  return "?";
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kBarrier: return "barrier";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
  }
  return "?";
}

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kDirect: return "direct";
    case Algo::kChain: return "chain";
    case Algo::kTree: return "tree";
    case Algo::kRecursiveDoubling: return "rd";
    case Algo::kHierarchical: return "hier";
  }
  return "?";
}

bool build_schedule(const ScheduleRequest& req, Schedule* out) {
  *out = Schedule{};
  if (req.nranks < 1 || req.rank < 0 || req.rank >= req.nranks || req.elem_bytes == 0) return false;
  switch (req.coll) {
    case Collective::kAllReduce:
      if (req.algo == Algo::kRing) return ring_all_reduce(req, out), true;
      if (req.algo == Algo::kDirect) return direct_all_reduce(req, out), true;
      if (req.algo == Algo::kTree) return tree_all_reduce(req, out), true;
      if (req.algo == Algo::kRecursiveDoubling) return recursive_doubling_all_reduce(req, out), true;
      if (req.algo == Algo::kHierarchical) return hierarchical_all_reduce(req, out);
      return false;
    case Collective::kReduceScatter:
      if (req.algo == Algo::kRing) return ring_reduce_scatter(req, out), true;
      return false;
    case Collective::kAllGather:
      if (req.algo == Algo::kRing) return ring_all_gather(req, out), true;
      return false;
    case Collective::kBroadcast:
      if (req.algo == Algo::kChain) return chain_broadcast(req, out), true;
      return false;
    case Collective::kReduce:
      if (req.algo == Algo::kChain) return chain_reduce(req, out), true;
      return false;
    case Collective::kBarrier:
      if (req.algo == Algo::kDirect) return direct_barrier(req, out), true;
      return false;
    case Collective::kSend:
    case Collective::kRecv:
      return false;  // point-to-point has no schedule
  }
  return false;
}

}  // namespace accord
