// GoogleTest main for tests that need hardware this machine may not have: exits 77 when every
// selected test skipped, so that meson reports SKIP rather than OK (a GPU test that could not
// run must not look like a pass).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return 77;
  return rc;
}
