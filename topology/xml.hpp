// A small XML reader and writer, enough for NCCL topology files: elements, attributes, comments,
// <?xml?> declarations, the five predefined entities. No namespaces, DTDs or CDATA. Each element
// remembers its line so that readers can say where a file is wrong.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace accord::topo::xml {

struct Element {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<std::unique_ptr<Element>> children;
  int line = 0;

  // Attribute value, or nullptr.
  const std::string* attr(const std::string& key) const;
  std::string attr_or(const std::string& key, const std::string& fallback) const;
};

// Parses a whole document; the root element goes to *root. Errors say "name:line: ...".
Status parse(const std::string& text, const std::string& name, std::unique_ptr<Element>* root);

// Escapes &, <, >, " for attribute values.
std::string escape(const std::string& s);

}  // namespace accord::topo::xml
