// The XML reader behind NCCL topology files (see xml.hpp for what it accepts). A recursive descent
// over the text that tracks the line number; malformed input is an error naming file and line.
#include "topology/xml.hpp"

#include <cstring>

namespace accord::topo::xml {

const std::string* Element::attr(const std::string& key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

std::string Element::attr_or(const std::string& key, const std::string& fallback) const {
  const std::string* v = attr(key);
  return v ? *v : fallback;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& name) : t_(text), name_(name) {}

  Status document(std::unique_ptr<Element>* root) {
    ACCORD_TRY(misc());
    if (eof() || t_[pos_] != '<') return fail("expected a root element '<...>'");
    ACCORD_TRY(element(root, 0));
    ACCORD_TRY(misc());
    if (!eof()) return fail("expected the end of the file after the root element");
    return Status();
  }

 private:
  bool eof() const { return pos_ >= t_.size(); }
  bool starts(const char* s) const { return t_.compare(pos_, std::strlen(s), s) == 0; }
  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < t_.size(); ++i) line_ += t_[pos_++] == '\n';
  }
  void skip_space() {
    while (!eof() && isspace(static_cast<unsigned char>(t_[pos_]))) advance(1);
  }
  Status fail(const std::string& what) {
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: %s", name_.c_str(), line_, what.c_str());
  }

  // Whitespace, comments and declarations between elements.
  Status misc() {
    for (;;) {
      skip_space();
      if (starts("<!--")) {
        size_t end = t_.find("-->", pos_ + 4);
        if (end == std::string::npos) return fail("comment '<!--' is never closed with '-->'");
        advance(end + 3 - pos_);
      } else if (starts("<?") || starts("<!")) {
        size_t end = t_.find('>', pos_);
        if (end == std::string::npos) return fail("declaration is never closed with '>'");
        advance(end + 1 - pos_);
      } else {
        return Status();
      }
    }
  }

  Status name(std::string* out) {
    size_t start = pos_;
    while (!eof() && (isalnum(static_cast<unsigned char>(t_[pos_])) || strchr("_-.:", t_[pos_])))
      advance(1);
    if (pos_ == start) return fail("expected a name");
    *out = t_.substr(start, pos_ - start);
    return Status();
  }

  Status decode(const std::string& raw, std::string* out) {
    out->clear();
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        *out += raw[i];
        continue;
      }
      static const std::pair<const char*, char> kEntities[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool found = false;
      for (const auto& [ent, ch] : kEntities)
        if (raw.compare(i, strlen(ent), ent) == 0) {
          *out += ch;
          i += strlen(ent) - 1;
          found = true;
          break;
        }
      if (!found) return fail("unknown entity in attribute value '" + raw + "'");
    }
    return Status();
  }

  Status element(std::unique_ptr<Element>* out, int depth) {
    if (depth > 64) return fail("elements nested more than 64 deep");
    auto e = std::make_unique<Element>();
    e->line = line_;
    advance(1);  // '<'
    ACCORD_TRY(name(&e->name));
    for (;;) {
      skip_space();
      if (eof()) return fail("element <" + e->name + "> is not closed with '>'");
      if (starts("/>")) {
        advance(2);
        *out = std::move(e);
        return Status();
      }
      if (t_[pos_] == '>') {
        advance(1);
        break;
      }
      std::string key, value;
      ACCORD_TRY(name(&key));
      skip_space();
      if (eof() || t_[pos_] != '=') return fail("expected '=' after attribute '" + key + "'");
      advance(1);
      skip_space();
      if (eof() || (t_[pos_] != '"' && t_[pos_] != '\''))
        return fail("expected a quoted value for attribute '" + key + "'");
      char q = t_[pos_];
      size_t end = t_.find(q, pos_ + 1);
      if (end == std::string::npos) return fail("value of attribute '" + key + "' is not closed");
      ACCORD_TRY(decode(t_.substr(pos_ + 1, end - pos_ - 1), &value));
      advance(end + 1 - pos_);
      e->attrs.emplace_back(std::move(key), std::move(value));
    }
    // Content: children, comments and text (ignored) up to </name>.
    for (;;) {
      while (!eof() && t_[pos_] != '<') advance(1);
      if (eof()) return fail("element <" + e->name + "> (line " + std::to_string(e->line) +
                             ") is never closed");
      if (starts("</")) {
        advance(2);
        std::string closing;
        ACCORD_TRY(name(&closing));
        skip_space();
        if (closing != e->name)
          return fail("expected </" + e->name + "> (opened on line " + std::to_string(e->line) +
                      "), found </" + closing + ">");
        if (eof() || t_[pos_] != '>') return fail("expected '>' after </" + closing);
        advance(1);
        *out = std::move(e);
        return Status();
      }
      if (starts("<!--") || starts("<?")) {
        ACCORD_TRY(misc());
        continue;
      }
      std::unique_ptr<Element> child;
      ACCORD_TRY(element(&child, depth + 1));
      e->children.push_back(std::move(child));
    }
  }

  const std::string& t_;
  std::string name_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

Status parse(const std::string& text, const std::string& name, std::unique_ptr<Element>* root) {
  return Parser(text, name).document(root);
}

}  // namespace accord::topo::xml
