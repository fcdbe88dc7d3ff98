// The GoogleTest main of every test binary (tests/meson.build: gtest_skip_main_dep). A skipped
// test must not look like a pass: the binary exits 77, which meson reports as SKIP, when every
// selected test skipped (a GPU test on a machine without one); when only some skipped it passes
// and prints "# skipped N of M tests: Suite.Name, ..." as its last line, which the summary of
// scripts/test.sh counts. ACCORD_TEST_SKIP_ALL=1 skips every test before it starts, so that
// support/skip_main_test.sh can tell that a binary has this main (a plain gtest_main would run
// the tests and exit 0).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
class SkipAll : public ::testing::Environment {
 public:
  void SetUp() override { GTEST_SKIP() << "ACCORD_TEST_SKIP_ALL is set"; }
};
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* skip = std::getenv("ACCORD_TEST_SKIP_ALL"); skip != nullptr && std::strcmp(skip, "1") == 0)
    ::testing::AddGlobalTestEnvironment(new SkipAll);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  const int ran = u.test_to_run_count(), skipped = u.skipped_test_count();
  if (rc != 0) return rc;
  // A skip in a global environment's SetUp (SkipAll) skips every test but counts none.
  if (u.ad_hoc_test_result().Skipped() || (skipped > 0 && skipped == ran)) return 77;
  if (skipped == 0) return 0;
  std::string names;
  for (int s = 0; s < u.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *u.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      if (info.should_run() && info.result()->Skipped())
        names += std::string(names.empty() ? "" : ", ") + suite.name() + "." + info.name();
    }
  }
  std::printf("# skipped %d of %d tests: %s\n", skipped, ran, names.c_str());
  std::fflush(stdout);
  return 0;
}
