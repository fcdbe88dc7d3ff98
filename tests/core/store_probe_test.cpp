// Note [Store mode probe] (collectives/store_probe.cpp): the decision from made-up probes, and
// the probe's numbers through the store's text and back.
#include "collectives/store_probe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace accord {
namespace {

StoreProbe probe(double ordinary, double streaming) {
  StoreProbe p;
  p.ordinary_ns_per_byte = ordinary;
  p.streaming_ns_per_byte = streaming;
  p.took_ms = 9.5;
  return p;
}

TEST(StoreProbe, NonTemporalOnlyWhenAtLeastFivePercentFaster) {
  EXPECT_TRUE(decide_store_mode({probe(0.40, 0.30)}).streaming);
  EXPECT_TRUE(decide_store_mode({probe(0.40, 0.379)}).streaming);
  EXPECT_FALSE(decide_store_mode({probe(0.40, 0.381)}).streaming);  // 4.75% faster: not enough
  EXPECT_FALSE(decide_store_mode({probe(0.40, 0.40)}).streaming);
  EXPECT_FALSE(decide_store_mode({probe(0.30, 0.40)}).streaming);
  const StoreDecision d = decide_store_mode({probe(0.40, 0.30)});
  EXPECT_TRUE(d.measured);
  EXPECT_DOUBLE_EQ(d.ordinary_ns_per_byte, 0.40);
  EXPECT_DOUBLE_EQ(d.streaming_ns_per_byte, 0.30);
}

// The slowest rank's pass counts for each kind: here rank 1 is slow with non-temporal stores,
// so although rank 0 gains 25% with them, the host does not.
TEST(StoreProbe, TheSlowestRankDecidesForEachKindOfStore) {
  const StoreDecision d = decide_store_mode({probe(0.40, 0.30), probe(0.41, 0.42)});
  EXPECT_FALSE(d.streaming);
  EXPECT_DOUBLE_EQ(d.ordinary_ns_per_byte, 0.41);
  EXPECT_DOUBLE_EQ(d.streaming_ns_per_byte, 0.42);
  EXPECT_TRUE(
      decide_store_mode({probe(0.40, 0.30), probe(0.50, 0.35), probe(0.45, 0.20)}).streaming);
}

// Every rank of a host gets the probes in rank order, but the decision must not depend on it.
TEST(StoreProbe, TheSameProbesInAnyOrderDecideAlike) {
  std::vector<StoreProbe> v = {probe(0.40, 0.30), probe(0.52, 0.49), probe(0.38, 0.50),
                               probe(0.61, 0.33)};
  std::vector<int> order = {0, 1, 2, 3};
  const StoreDecision first = decide_store_mode(v);
  do {
    std::vector<StoreProbe> w;
    for (int i : order) w.push_back(v[static_cast<size_t>(i)]);
    const StoreDecision d = decide_store_mode(w);
    EXPECT_EQ(d.streaming, first.streaming);
    EXPECT_EQ(d.ordinary_ns_per_byte, first.ordinary_ns_per_byte);
    EXPECT_EQ(d.streaming_ns_per_byte, first.streaming_ns_per_byte);
  } while (std::next_permutation(order.begin(), order.end()));
}

// No probe, or one that is not a positive number, leaves ordinary stores.
TEST(StoreProbe, AMissingOrBrokenProbeLeavesOrdinaryStores) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<StoreProbe>& v :
       std::vector<std::vector<StoreProbe>>{{},
                                            {probe(0, 0.1)},
                                            {probe(0.4, 0)},
                                            {probe(0.4, 0.1), probe(nan, 0.1)},
                                            {probe(0.4, 0.1), probe(0.4, -1)},
                                            {probe(inf, 0.1)}}) {
    const StoreDecision d = decide_store_mode(v);
    EXPECT_FALSE(d.streaming);
    EXPECT_FALSE(d.measured);
  }
}

// Every rank decides from the text the store carries: it must give back the exact numbers.
TEST(StoreProbe, ProbesCrossTheStoreExactly) {
  const StoreProbe p = probe(0.1 + 0.2, 1.0 / 3.0);
  StoreProbe q;
  ASSERT_TRUE(decode_store_probe(encode_store_probe(p), &q));
  EXPECT_EQ(q.ordinary_ns_per_byte, p.ordinary_ns_per_byte);
  EXPECT_EQ(q.streaming_ns_per_byte, p.streaming_ns_per_byte);
  EXPECT_EQ(q.took_ms, p.took_ms);
  EXPECT_FALSE(decode_store_probe("", &q));
  EXPECT_FALSE(decode_store_probe("0x1p-1", &q));
}

// The probe itself measures both kinds (a positive time each; which is faster depends on the
// machine, so not checked).
TEST(StoreProbe, TheProbeTimesBothKindsOfStore) {
  const StoreProbe p = run_store_probe();
  EXPECT_GT(p.ordinary_ns_per_byte, 0);
  EXPECT_GT(p.streaming_ns_per_byte, 0);
  EXPECT_GE(p.took_ms, 0);
}

}  // namespace
}  // namespace accord
