// Where the real-machine topology fixtures live: $ACCORD_FIXTURES_DIR, else the shared/ folder
// beside the repository (repo/../shared/fixtures/topologies), as CI lays it out.
#pragma once

#include <cstdlib>
#include <string>

inline std::string fixture(const std::string& name) {
  const char* dir = std::getenv("ACCORD_FIXTURES_DIR");
  return std::string(dir && *dir ? dir : ACCORD_FIXTURES_DIR) + "/" + name;
}
