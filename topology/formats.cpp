// Format detection and file I/O for topology files (formats.hpp).
#include "topology/formats.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace accord::topo {

FileFormat detect_format(const std::string& text) {
  size_t i = text.find_first_not_of(" \t\r\n");
  if (i != std::string::npos && text[i] == '{') return FileFormat::kJson;
  // XML: the first non-blank character opens a tag or comment, and a <system> element follows.
  if (i != std::string::npos && text[i] == '<' && text.find("<system") != std::string::npos)
    return FileFormat::kNcclXml;
  return FileFormat::kText;
}

namespace {

// Files saved on Windows: a UTF-8 byte order mark, or UTF-16 (PowerShell's `>` writes UTF-16LE
// with a BOM, e.g. p2pBandwidthLatencyTest.exe > out.txt). Everything we read is ASCII, so UTF-16
// code units above 0x7f become '?'.
std::string plain_text(const std::string& text) {
  auto starts = [&](const char* bom, size_t n) { return text.size() >= n && text.compare(0, n, bom, n) == 0; };
  if (starts("\xef\xbb\xbf", 3)) return text.substr(3);
  bool le = starts("\xff\xfe", 2), be = starts("\xfe\xff", 2);
  if (!le && !be) return text;
  std::string out;
  out.reserve(text.size() / 2);
  for (size_t i = 2; i + 1 < text.size(); i += 2) {
    unsigned lo = static_cast<unsigned char>(text[le ? i : i + 1]);
    unsigned hi = static_cast<unsigned char>(text[le ? i + 1 : i]);
    unsigned unit = hi << 8 | lo;
    out += unit < 0x80 ? static_cast<char>(unit) : '?';
  }
  return out;
}

}  // namespace

Status parse_system(const std::string& raw, const std::string& name, System* out) {
  const std::string text = plain_text(raw);
  switch (detect_format(text)) {
    case FileFormat::kJson: return parse_accord_json(text, name, out);
    case FileFormat::kNcclXml: return parse_nccl_xml(text, name, out);
    default: return parse_text_logs(text, name, out);
  }
}

Status read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return system_error(errno, "cannot open topology file %s", path.c_str());
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return system_error(errno, "cannot read topology file %s", path.c_str());
  *out = buf.str();
  return Status();
}

Status load_system_file(const std::string& path, System* out) {
  std::string text;
  ACCORD_TRY(read_file(path, &text));
  return parse_system(text, path, out);
}

Status write_file(const std::string& path, const std::string& contents) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return system_error(errno, "cannot create %s", path.c_str());
  size_t n = std::fwrite(contents.data(), 1, contents.size(), f);
  int err = errno;
  if (std::fclose(f) != 0 || n != contents.size())
    return system_error(err ? err : errno, "cannot write %s", path.c_str());
  return Status();
}

}  // namespace accord::topo
