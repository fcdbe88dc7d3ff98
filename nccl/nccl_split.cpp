// ncclCommSplit and ncclCommShrink on Accord's public API: a new communicator made from an
// existing one. Split all-gathers every rank's (color, key) over the parent; the first rank
// of each color in (key, rank) order, its new rank 0, makes a unique id that travels in a
// second all-gather. Shrink cannot all-gather (the excluded ranks do not call it): the
// lowest remaining rank sends the id to the others over the parent's point-to-point. Both
// give the child the parent's GPU. Inside a group they run at ncclGroupEnd (nccl_calls.cpp).
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "nccl_layer.hpp"

using namespace accord_nccl;

namespace {

int device_of(accord_comm_t c) {
  int d = -1;
  return accord_comm_device(c, &d) == ACCORD_SUCCESS ? d : -1;
}

// Creates rank `rank` of `nranks` from `id` on `device` in the handle `child` (its blocking
// mode already set: the config's, else the parent's).
ncclResult_t make_child(ncclComm_t child, int parent_rank, int nranks, const accord_unique_id_t& id,
                        int rank, int device, const char* fn) {
  child->rank = rank;
  child->nranks = nranks;
  accord_comm_t c = nullptr;
  ncclResult_t r = result(accord_comm_init_rank_device(&c, nranks, id, rank, device), nullptr);
  if (r != ncclSuccess) {
    child->init_error = std::string(fn) + ": " + last_error();
    child->state.store(r);
    return fail(r, "%s: rank %d: creating the new communicator (rank %d of %d) failed: %s", fn,
                parent_rank, rank, nranks, child->init_error.c_str());
  }
  child->acc = c;
  child->state.store(ncclSuccess);
  return ncclSuccess;
}

// A grouped split or shrink that failed before creating its child: the child carries the
// failure (ncclCommGetAsyncError, later calls) instead of staying "in progress".
ncclResult_t settle(ncclComm_t child, ncclResult_t r) {
  if (r != ncclSuccess && child != nullptr && child->state.load() == ncclInProgress) {
    child->init_error = last_error();
    child->state.store(r);
  }
  return r;
}

struct SplitEntry {
  int32_t color, key, rank, pad;
};

ncclResult_t do_split(ncclComm_t comm, int color, int key, ncclComm_t child) {
  const char* fn = "ncclCommSplit";
  accord_comm_t parent = nullptr;
  ncclResult_t r = ready(comm, fn, &parent);
  if (r != ncclSuccess) return r;
  int n = 0, me = 0;
  accord_comm_count(parent, &n);
  accord_comm_rank(parent, &me);
  // Every rank learns every rank's (color, key), then the leader of each color (its new rank
  // 0) makes the unique id that its members join with.
  SplitEntry mine{color, key, me, 0};
  std::vector<SplitEntry> all(static_cast<size_t>(n));
  r = result(accord_all_gather(&mine, all.data(), 4, ACCORD_INT32, parent, nullptr), parent);
  if (r != ncclSuccess)
    return fail(r,
                "%s: rank %d: exchanging colors and keys over the parent communicator failed: %s",
                fn, me, last_error().c_str());
  std::vector<SplitEntry> members;
  for (const SplitEntry& e : all)
    if (color != NCCL_SPLIT_NOCOLOR && e.color == color) members.push_back(e);
  std::stable_sort(members.begin(), members.end(), [](const SplitEntry& a, const SplitEntry& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  accord_unique_id_t id{};
  const bool leader = !members.empty() && members[0].rank == me;
  if (leader) {
    r = result(accord_get_unique_id(&id), nullptr);
    if (r != ncclSuccess) std::memset(&id, 0, sizeof id);  // the others see no id and fail alike
  }
  std::vector<accord_unique_id_t> ids(static_cast<size_t>(n));
  ncclResult_t r2 =
      result(accord_all_gather(&id, ids.data(), sizeof id, ACCORD_UINT8, parent, nullptr), parent);
  if (r != ncclSuccess || r2 != ncclSuccess)
    return fail(r != ncclSuccess ? r : r2,
                "%s: rank %d: distributing the new communicator's unique id failed: %s", fn, me,
                last_error().c_str());
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  int new_rank = 0;
  while (members[static_cast<size_t>(new_rank)].rank != me) ++new_rank;
  return make_child(child, me, static_cast<int>(members.size()),
                    ids[static_cast<size_t>(members[0].rank)], new_rank, device_of(parent), fn);
}

ncclResult_t do_shrink(ncclComm_t comm, std::vector<int> excluded, ncclComm_t child) {
  const char* fn = "ncclCommShrink";
  accord_comm_t parent = nullptr;
  ncclResult_t r = ready(comm, fn, &parent);
  if (r != ncclSuccess) return r;
  int n = 0, me = 0;
  accord_comm_count(parent, &n);
  accord_comm_rank(parent, &me);
  accord_status_t broken = ACCORD_SUCCESS;
  accord_comm_get_async_error(parent, &broken);
  if (broken != ACCORD_SUCCESS)
    return fail(ncclInvalidUsage,
                "%s: rank %d: the parent communicator has failed (%s), and Accord makes the new "
                "communicator's unique id travel over the parent's channels, which are out of step "
                "after a failure; "
                "create the new communicator with ncclGetUniqueId + ncclCommInitRank among the "
                "remaining ranks "
                "instead",
                fn, me, accord_last_error(parent));
  std::vector<int> survivors;
  for (int q = 0; q < n; ++q)
    if (!std::binary_search(excluded.begin(), excluded.end(), q)) survivors.push_back(q);
  const int leader = survivors[0];
  accord_unique_id_t id{};
  if (me == leader) {
    r = result(accord_get_unique_id(&id), nullptr);
    if (r != ncclSuccess) std::memset(&id, 0, sizeof id);
    accord_group_start();
    for (size_t i = 1; i < survivors.size(); ++i)
      accord_send(&id, sizeof id, ACCORD_UINT8, survivors[i], parent, nullptr);
    ncclResult_t r2 = result(accord_group_end(), nullptr);
    if (r == ncclSuccess) r = r2;
  } else {
    r = result(accord_recv(&id, sizeof id, ACCORD_UINT8, leader, parent, nullptr), parent);
  }
  if (r != ncclSuccess)
    return fail(r, "%s: rank %d: passing the new communicator's unique id from rank %d failed: %s",
                fn, me, leader, last_error().c_str());
  const int new_rank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), me) - survivors.begin());
  return make_child(child, me, static_cast<int>(survivors.size()), id, new_rank, device_of(parent),
                    fn);
}

}  // namespace

NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = nullptr;
  ncclResult_t r = check_handle(comm, fn);
  if (r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument,
                "%s: rank %d: color %d is negative; use a color >= 0, or NCCL_SPLIT_NOCOLOR (-1) "
                "for a rank that joins no new communicator",
                fn, comm->rank, color);
  ncclComm_t child = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    child = new_handle();
    bool blocking = comm->blocking;
    r = blocking_of(config, true, fn, &blocking);
    if (r != ncclSuccess) return child->magic.store(kDead), r;
    child->blocking = blocking;
  }
  // The new communicator is ready when this returns (inside a group: at ncclGroupEnd), in
  // non-blocking mode too (NCCL allows ncclSuccess there).
  if (in_group()) {
    *newcomm = child;
    defer_comm_job(
        [comm, color, key, child] { return settle(child, do_split(comm, color, key, child)); });
    return ncclSuccess;
  }
  r = do_split(comm, color, key, child);
  if (r != ncclSuccess) {
    if (child != nullptr) child->magic.store(kDead);
    return r;
  }
  *newcomm = child;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = nullptr;
  ncclResult_t r = check_handle(comm, fn);
  if (r != ncclSuccess) return r;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument,
                "%s: rank %d: shrinkFlags %d; use NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", fn,
                comm->rank, shrinkFlags);
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr))
    return fail(ncclInvalidArgument,
                "%s: rank %d: excludeRanksList is NULL or excludeRanksCount %d < 0", fn, comm->rank,
                excludeRanksCount);
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  for (int q : excluded)
    if (q < 0 || q >= comm->nranks)
      return fail(ncclInvalidArgument, "%s: rank %d: excluded rank %d is out of range 0..%d", fn,
                  comm->rank, q, comm->nranks - 1);
  if (std::binary_search(excluded.begin(), excluded.end(), comm->rank))
    return fail(ncclInvalidArgument,
                "%s: rank %d is in excludeRanksList; only the ranks that stay call "
                "ncclCommShrink",
                fn, comm->rank);
  ncclComm_t child = new_handle();
  bool blocking = comm->blocking;
  r = blocking_of(config, true, fn, &blocking);
  if (r != ncclSuccess) return child->magic.store(kDead), r;
  child->blocking = blocking;
  if (in_group()) {
    *newcomm = child;
    defer_comm_job(
        [comm, excluded, child] { return settle(child, do_shrink(comm, excluded, child)); });
    return ncclSuccess;
  }
  r = do_shrink(comm, excluded, child);
  if (r != ncclSuccess) return child->magic.store(kDead), r;
  *newcomm = child;
  return ncclSuccess;
}
