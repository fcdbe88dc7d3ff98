// Ranks as threads of this process (the benchmarks' -t N): one communicator per rank from one
// unique id, each rank's body on its own thread, the worst exit code of them (2 when a rank
// could not start). Header-only for the reason sizes.hpp gives.
#pragma once

#include <accord/accord.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

namespace accord::bench {

// `prefix` starts every error line (the program's name and ": ", or "").
inline int run_rank_threads(int nranks, const char* prefix,
                            const std::function<int(accord_comm_t, int)>& body) {
  accord_unique_id_t id;
  if (accord_get_unique_id(&id) != ACCORD_SUCCESS) {
    std::fprintf(stderr, "%saccord_get_unique_id: %s\n", prefix, accord_last_error(nullptr));
    return 2;
  }
  std::vector<int> codes(static_cast<size_t>(nranks), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      accord_comm_t comm = nullptr;
      if (accord_comm_init_rank(&comm, nranks, id, r) != ACCORD_SUCCESS) {
        std::fprintf(stderr, "%srank %d: init failed: %s\n", prefix, r, accord_last_error(nullptr));
        codes[static_cast<size_t>(r)] = 2;
        return;
      }
      codes[static_cast<size_t>(r)] = body(comm, r);
      accord_comm_destroy(comm);
    });
  for (auto& t : threads) t.join();
  return *std::max_element(codes.begin(), codes.end());
}

}  // namespace accord::bench
