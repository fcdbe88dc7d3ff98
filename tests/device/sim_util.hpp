// Helpers for the device runtime tests: where the topology fixtures are ($ACCORD_FIXTURES_DIR,
// set by meson), and a simulated runtime made from one of them.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "transport/device/sim_runtime.hpp"

namespace accord::testing {

inline const char* const kDgx1 = "dgx1-v100-topo-m.txt";
inline const char* const kTf4 = "tf-4gpu-cannot-enable-peer-access-dma-matrix.txt";

inline std::string fixture_path(const std::string& name) {
  const char* dir = std::getenv("ACCORD_FIXTURES_DIR");
  return std::string(dir && *dir ? dir : "../shared/fixtures/topologies") + "/" + name;
}

inline std::unique_ptr<SimulatedRuntime> make_sim(const std::string& name, SimOptions options = {}) {
  std::unique_ptr<SimulatedRuntime> rt;
  Status st = SimulatedRuntime::from_file(fixture_path(name), options, &rt);
  EXPECT_TRUE(st.ok()) << st.message();
  return rt;
}

#define ASSERT_OK(expr)                                   \
  do {                                                    \
    ::accord::Status assert_ok_ = (expr);                 \
    ASSERT_TRUE(assert_ok_.ok()) << assert_ok_.message(); \
  } while (0)
#define EXPECT_OK(expr)                                   \
  do {                                                    \
    ::accord::Status expect_ok_ = (expr);                 \
    EXPECT_TRUE(expect_ok_.ok()) << expect_ok_.message(); \
  } while (0)

// Expects a failure with `code` whose message contains `text`.
inline ::testing::AssertionResult fails_with(const Status& st, accord_status_t code, const std::string& text) {
  if (st.ok()) return ::testing::AssertionFailure() << "succeeded; expected code " << code << " with \"" << text << "\"";
  if (st.code() != code)
    return ::testing::AssertionFailure() << "code " << st.code() << " instead of " << code << ": " << st.message();
  if (st.message().find(text) == std::string::npos)
    return ::testing::AssertionFailure() << "message lacks \"" << text << "\": " << st.message();
  return ::testing::AssertionSuccess();
}

}  // namespace accord::testing
