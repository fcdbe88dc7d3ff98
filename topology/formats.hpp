// Reading and writing a System as files. The format is detected from the content, never from the
// name: Accord JSON (starts with '{'), NCCL topology XML (a <system> element), or text that holds
// any mix of `nvidia-smi topo -m`, `nvidia-smi topo -p2p r|w|rw|p`, TensorFlow's peer-access log
// ("DMA:" matrix), and the CUDA samples simpleP2P / p2pBandwidthLatencyTest. Errors name the file,
// the line, and what was expected there.
#pragma once

#include <string>

#include "core/status.hpp"
#include "topology/system.hpp"

namespace accord::topo {

struct Plan;

enum class FileFormat { kJson, kNcclXml, kText };

FileFormat detect_format(const std::string& text);

// Reads `path`, parses it in whichever format it is, and finalizes the System.
Status load_system_file(const std::string& path, System* out);
// Same for text already in memory; `name` is used in messages.
Status parse_system(const std::string& text, const std::string& name, System* out);

Status parse_nccl_xml(const std::string& text, const std::string& name, System* out);
Status parse_text_logs(const std::string& text, const std::string& name, System* out);
Status parse_accord_json(const std::string& text, const std::string& name, System* out);

// Accord JSON: the model (devices, links, observations; read back losslessly) plus the derived view
// that accord-topo --format json documents (gpus, pairs, and rings/trees when `plan` is given).
std::string write_accord_json(const System& s, const Plan* plan);
// NCCL topology XML (NCCL_TOPO_FILE format, version 1).
std::string write_nccl_xml(const System& s);

Status read_file(const std::string& path, std::string* out);
Status write_file(const std::string& path, const std::string& contents);

}  // namespace accord::topo
