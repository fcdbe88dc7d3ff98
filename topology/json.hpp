// A small JSON reader and writer for Accord's topology files: the six value kinds, objects keep
// their key order, every value remembers its line for error messages. Numbers are doubles and are
// written in the shortest form that reads back to the same double, so files round-trip exactly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace accord::topo::json {

struct Value {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> items;                            // arrays
  std::vector<std::pair<std::string, Value>> members;  // objects, in file order
  int line = 0;

  const Value* find(const std::string& key) const;  // nullptr when absent or not an object
};

Status parse(const std::string& text, const std::string& name, Value* out);

// Quoted and escaped.
std::string quote(const std::string& s);
// Shortest text that reads back as the same double ("40", "370.8", "0.1").
std::string number(double v);

}  // namespace accord::topo::json
