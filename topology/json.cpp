// The JSON reader (recursive descent with line tracking) and the two writer helpers.
#include "topology/json.hpp"

#include <charconv>
#include <cmath>
#include <cstring>

namespace accord::topo::json {

const Value* Value::find(const std::string& key) const {
  if (kind != kObject) return nullptr;
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& name) : t_(text), name_(name) {}

  Status document(Value* out) {
    ACCORD_TRY(value(out, 0));
    skip();
    if (pos_ < t_.size()) return fail("expected the end of the file after the top-level value");
    return Status();
  }

 private:
  Status fail(const std::string& what) {
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: %s", name_.c_str(), line_, what.c_str());
  }
  void skip() {
    while (pos_ < t_.size() && isspace(static_cast<unsigned char>(t_[pos_]))) {
      line_ += t_[pos_] == '\n';
      ++pos_;
    }
  }
  bool take(const char* word) {
    if (t_.compare(pos_, strlen(word), word) != 0) return false;
    pos_ += strlen(word);
    return true;
  }

  Status value(Value* v, int depth) {
    if (depth > 64) return fail("values nested more than 64 deep");
    skip();
    v->line = line_;
    if (pos_ >= t_.size()) return fail("expected a value, found the end of the file");
    char c = t_[pos_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v->kind = Value::kString;
      return string(&v->string);
    }
    if (take("true")) return v->kind = Value::kBool, v->boolean = true, Status();
    if (take("false")) return v->kind = Value::kBool, v->boolean = false, Status();
    if (take("null")) return v->kind = Value::kNull, Status();
    if (c == '-' || (c >= '0' && c <= '9')) {
      const char* begin = t_.data() + pos_;
      const char* end = t_.data() + t_.size();
      auto r = std::from_chars(begin, end, v->number);
      if (r.ec != std::errc()) return fail("malformed number");
      pos_ += r.ptr - begin;
      v->kind = Value::kNumber;
      return Status();
    }
    return fail(std::string("expected a value ({, [, \", number, true, false, null), found '") +
                c + "'");
  }

  Status string(std::string* out) {
    ++pos_;
    for (;;) {
      if (pos_ >= t_.size() || t_[pos_] == '\n') return fail("string is not closed with '\"'");
      char c = t_[pos_++];
      if (c == '"') return Status();
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= t_.size()) return fail("string is not closed with '\"'");
      char e = t_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': *out += e; break;
        case 'n': *out += '\n'; break;
        case 't': *out += '\t'; break;
        case 'r': *out += '\r'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'u': {
          unsigned cp = 0;
          if (pos_ + 4 > t_.size() || std::sscanf(t_.c_str() + pos_, "%4x", &cp) != 1)
            return fail("expected 4 hex digits after \\u");
          pos_ += 4;
          // UTF-8 encode (surrogate pairs are passed through as two code points).
          if (cp < 0x80) {
            *out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            *out += static_cast<char>(0xc0 | (cp >> 6));
            *out += static_cast<char>(0x80 | (cp & 0x3f));
          } else {
            *out += static_cast<char>(0xe0 | (cp >> 12));
            *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            *out += static_cast<char>(0x80 | (cp & 0x3f));
          }
          break;
        }
        default: return fail(std::string("unknown escape '\\") + e + "' in string");
      }
    }
  }

  Status array(Value* v, int depth) {
    v->kind = Value::kArray;
    ++pos_;
    skip();
    if (take("]")) return Status();
    for (;;) {
      v->items.emplace_back();
      ACCORD_TRY(value(&v->items.back(), depth + 1));
      skip();
      if (take("]")) return Status();
      if (!take(",")) return fail("expected ',' or ']' in array");
    }
  }

  Status object(Value* v, int depth) {
    v->kind = Value::kObject;
    ++pos_;
    skip();
    if (take("}")) return Status();
    for (;;) {
      skip();
      if (pos_ >= t_.size() || t_[pos_] != '"') return fail("expected a quoted key in object");
      std::string key;
      ACCORD_TRY(string(&key));
      skip();
      if (!take(":")) return fail("expected ':' after key \"" + key + "\"");
      v->members.emplace_back(std::move(key), Value());
      ACCORD_TRY(value(&v->members.back().second, depth + 1));
      skip();
      if (take("}")) return Status();
      if (!take(",")) return fail("expected ',' or '}' in object");
    }
  }

  const std::string& t_;
  std::string name_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

Status parse(const std::string& text, const std::string& name, Value* out) {
  *out = Value();
  return Parser(text, name).document(out);
}

}  // namespace accord::topo::json
