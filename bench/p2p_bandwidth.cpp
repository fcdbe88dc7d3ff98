// p2p_bandwidth: options, the choice of mode, and the table (see p2p_bandwidth.hpp).
//
// Modes: alone, every ordered pair of this process's GPUs (-g N, default all; simulated ones with
// ACCORD_SIM_TOPO); under a launcher (mpirun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) or
// with -t N, every ordered pair of ranks through the communicator's host channels.
#include "bench/p2p_bandwidth.hpp"
#include "bench/sizes.hpp"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace accord::bench::p2p {
namespace {

void usage(const char* prog) {
  std::printf(
      "usage: %s [options]\n"
      "Copy bandwidth and latency of every ordered GPU pair of this process (alone; -g N), or of\n"
      "every ordered rank pair on host memory (under mpirun or RANK/WORLD_SIZE/MASTER_ADDR/\n"
      "MASTER_PORT, or -t N), beside the topology's prediction.\n"
      "  -b SIZE   smallest bandwidth size (K/M/G suffixes; default 64M)\n"
      "  -e SIZE   largest bandwidth size, the one in the table (default 64M)\n"
      "  -f F      multiply the size by F each step     -i SIZE  add SIZE each step\n"
      "  -n N      timed copies per size, median (20)    -w N     warm-up copies (5)\n"
      "  -l SIZE   latency message (8)                   --lat-iters N  timed latency copies (100)\n"
      "  -c 0|1    check the destination after timing (1)\n"
      "  -g N      GPUs 0..N-1 of this process (default: every GPU of the runtime)\n"
      "  -t N      N host-memory ranks as threads of this process (rank pairs)\n"
      "  --flag-below F   flag pairs measured below F x predicted (0.5)\n"
      "  --chunk SIZE     host-staged GPU copies: chunk size (default: the shm transport's slot,\n"
      "                   ACCORD_SHM_SLOT_BYTES); as many chunks in flight as its slots\n"
      "  --no-staged      p2p GPU pairs: do not also time the host-staged route\n"
      "  --show-plan      print why every pair takes its route\n"
      "  --json FILE      also write the results as JSON\n"
      "  -z               accepted and ignored (nccl-tests)\n"
      "GPUs: ACCORD_SIM_TOPO=FILE gives simulated GPUs of that machine (their memory is host memory);\n"
      "ACCORD_P2P_DISABLE=1 times every GPU pair host-staged.\n",
      prog);
}

bool parse_args(int argc, char** argv, Options* o) {
  size_t min_bytes = 64 << 20, max_bytes = 64 << 20, step_bytes = 0;
  double factor = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = nullptr;
    auto next = [&] {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    if (a == "-h" || a == "--help") return usage(argv[0]), std::exit(0), true;
    if (a == "-z") continue;
    if (a == "--no-staged") { o->compare_staged = false; continue; }
    if (a == "--show-plan") { o->show_plan = true; continue; }
    bool ok = next();
    if (!ok) {
      std::fprintf(stderr, "p2p_bandwidth: unknown or incomplete option '%s' (see --help)\n", a.c_str());
      return false;
    }
    if (a == "-b") ok = parse_size(v, &min_bytes);
    else if (a == "-e") ok = parse_size(v, &max_bytes);
    else if (a == "-i") ok = parse_size(v, &step_bytes) && step_bytes > 0;
    else if (a == "-f") factor = std::atof(v), ok = factor > 1;
    else if (a == "-n") o->iters = std::atoi(v), ok = o->iters > 0;
    else if (a == "-w") o->warmup = std::atoi(v), ok = o->warmup >= 0;
    else if (a == "-l") ok = parse_size(v, &o->lat_bytes) && o->lat_bytes > 0;
    else if (a == "--lat-iters") o->lat_iters = std::atoi(v), ok = o->lat_iters > 0;
    else if (a == "-c") o->check = std::atoi(v), ok = o->check == 0 || o->check == 1;
    else if (a == "-g") o->gpus = std::atoi(v), ok = o->gpus > 0;
    else if (a == "-t") o->threads = std::atoi(v), ok = o->threads > 0;
    else if (a == "--flag-below") o->flag_below = std::atof(v), ok = o->flag_below >= 0;
    else if (a == "--chunk") ok = parse_size(v, &o->chunk_bytes) && o->chunk_bytes > 0;
    else if (a == "--json") o->json_path = v;
    else {
      std::fprintf(stderr, "p2p_bandwidth: unknown option '%s' (see --help)\n", a.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "p2p_bandwidth: bad value '%s' for %s (see --help)\n", v, a.c_str());
      return false;
    }
  }
  if (min_bytes == 0 || min_bytes > max_bytes) {
    std::fprintf(stderr, "p2p_bandwidth: sizes -b %zu -e %zu: need 0 < -b <= -e\n", min_bytes, max_bytes);
    return false;
  }
  for (size_t b = min_bytes; b <= max_bytes;) {
    o->sizes.push_back(b);
    if (factor > 0) b = std::max(b + 1, static_cast<size_t>(static_cast<double>(b) * factor));
    else if (step_bytes > 0) b += step_bytes;
    else break;
  }
  if (o->sizes.back() != max_bytes) o->sizes.push_back(max_bytes);  // the table's size
  return true;
}

// Ranks started by a launcher: more than one of them.
bool launched_with_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && std::atoi(s) > 1) return true;
  }
  return false;
}

void json_string(FILE* f, const std::string& s) {
  std::fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\') std::fputc('\\', f);
    if (static_cast<unsigned char>(c) < 0x20) std::fprintf(f, "\\u%04x", c);
    else std::fputc(c, f);
  }
  std::fputc('"', f);
}

bool write_json(const Options& o, const Context& ctx, const std::vector<PairResult>& rows) {
  FILE* f = std::fopen(o.json_path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "p2p_bandwidth: --json %s: cannot open for writing: %s\n", o.json_path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::fprintf(f, "{\n  \"benchmark\": \"p2p_bandwidth\",\n  \"mode\": ");
  json_string(f, ctx.mode);
  std::fprintf(f, ",\n  \"notes\": [");
  for (size_t i = 0; i < ctx.notes.size(); ++i) {
    std::fprintf(f, "%s", i ? ", " : "");
    json_string(f, ctx.notes[i]);
  }
  std::fprintf(f, "],\n  \"flag_below\": %g,\n  \"latency_bytes\": %zu,\n  \"pairs\": [\n", o.flag_below, o.lat_bytes);
  for (size_t i = 0; i < rows.size(); ++i) {
    const PairResult& r = rows[i];
    std::fprintf(f, "    {\"src\": %d, \"dst\": %d, \"route\": ", r.src, r.dst);
    json_string(f, r.route);
    std::fprintf(f, ", \"path\": ");
    json_string(f, r.path);
    std::fprintf(f, ", \"why\": ");
    json_string(f, r.why);
    std::fprintf(f, ", \"bandwidth\": [");
    for (size_t s = 0; s < r.gbs.size(); ++s)
      std::fprintf(f, "%s{\"bytes\": %zu, \"time_us\": %.3f, \"gbs\": %.4f}", s ? ", " : "", o.sizes[s], r.time_us[s],
                   r.gbs[s]);
    std::fprintf(f, "], \"predicted_gbs\": ");
    if (r.predicted_gbs > 0) std::fprintf(f, "%.4f", r.predicted_gbs);
    else std::fprintf(f, "null");
    std::fprintf(f, ", \"staged_gbs\": ");
    if (r.staged_gbs > 0) std::fprintf(f, "%.4f", r.staged_gbs);
    else std::fprintf(f, "null");
    std::fprintf(f, ", \"latency_us\": %.3f, \"flags\": ", r.latency_us);
    json_string(f, flags_of(o, r));
    std::fprintf(f, "}%s\n", i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  const bool ok = std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "p2p_bandwidth: --json %s: write failed\n", o.json_path.c_str());
  return ok;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string size_name(size_t bytes) {
  const char* units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return std::to_string(bytes) + units[u];
}

std::string flags_of(const Options& o, const PairResult& r) {
  std::string f;
  const double m = r.gbs.empty() ? 0 : r.gbs.back();
  if (r.predicted_gbs > 0 && m < o.flag_below * r.predicted_gbs) f = "SLOW";
  if (r.route == "p2p" && r.staged_gbs > 0 && m < r.staged_gbs) f += f.empty() ? "P2P<STAGED" : ",P2P<STAGED";
  return f;
}

int print_results(const Options& o, const Context& ctx, const std::vector<PairResult>& rows) {
  const size_t big = o.sizes.back();
  std::printf("#\n# %3s %4s %-11s %-4s %8s %10s %9s %9s %6s %9s %9s  %s\n", "src", "dst", "route", "path", "size",
              "time(us)", "GB/s", "predicted", "ratio", "staged", "lat(us)", "flags");
  int flagged = 0, slow = 0, p2p_slower = 0, predicted = 0;
  for (const PairResult& r : rows) {
    const double m = r.gbs.back();
    char pred[32] = "-", ratio[32] = "-", staged[32] = "-";
    if (r.predicted_gbs > 0) {
      std::snprintf(pred, sizeof pred, "%.2f", r.predicted_gbs);
      std::snprintf(ratio, sizeof ratio, "%.2f", m / r.predicted_gbs);
      ++predicted;
    }
    if (r.staged_gbs > 0) std::snprintf(staged, sizeof staged, "%.2f", r.staged_gbs);
    const std::string f = flags_of(o, r);
    flagged += !f.empty();
    slow += f.find("SLOW") != std::string::npos;
    p2p_slower += f.find("P2P<STAGED") != std::string::npos;
    std::printf("  %3d %4d %-11s %-4s %8s %10.2f %9.2f %9s %6s %9s %9.2f  %s\n", r.src, r.dst, r.route.c_str(),
                r.path.c_str(), size_name(big).c_str(), r.time_us.back(), m, pred, ratio, staged, r.latency_us,
                f.empty() ? "-" : f.c_str());
  }
  if (o.sizes.size() > 1) {
    std::printf("#\n# Bandwidth by size (GB/s, median of %d copies)\n# %-9s %-11s", o.iters, "pair", "route");
    for (size_t s : o.sizes) std::printf(" %8s", size_name(s).c_str());
    std::printf("\n");
    for (const PairResult& r : rows) {
      std::printf("  %-9s %-11s", (std::to_string(r.src) + "->" + std::to_string(r.dst)).c_str(), r.route.c_str());
      for (double g : r.gbs) std::printf(" %8.2f", g);
      std::printf("\n");
    }
  }
  // The same figures as matrices (rows: source, columns: destination), as CUDA's
  // p2pBandwidthLatencyTest prints them.
  int n = 0;
  for (const PairResult& r : rows) n = std::max(n, std::max(r.src, r.dst) + 1);
  const char* names[] = {"bandwidth at the table's size, GB/s", "latency, us"};
  for (int m = 0; m < 2 && n > 0; ++m) {
    std::printf("#\n# Matrix: %s (rows: source, columns: destination)\n# %4s", names[m], "");
    for (int d = 0; d < n; ++d) std::printf(" %7d", d);
    std::printf("\n");
    for (int s = 0; s < n; ++s) {
      std::printf("  %4d |", s);
      for (int d = 0; d < n; ++d) {
        auto it = std::find_if(rows.begin(), rows.end(), [&](const PairResult& r) { return r.src == s && r.dst == d; });
        if (it == rows.end()) std::printf(" %7s", "-");
        else std::printf(" %7.2f", m == 0 ? it->gbs.back() : it->latency_us);
      }
      std::printf("\n");
    }
  }
  std::printf("#\n# %d pairs, %d with a prediction; flagged: %d (SLOW, below %.2f x predicted: %d; P2P<STAGED, "
              "peer copies slower than host-staged ones: %d)\n",
              static_cast<int>(rows.size()), predicted, flagged, o.flag_below, slow, p2p_slower);
  std::fflush(stdout);
  if (!o.json_path.empty() && !write_json(o, ctx, rows)) return -1;
  return flagged;
}

}  // namespace accord::bench::p2p

int main(int argc, char** argv) {
  using namespace accord::bench::p2p;
  Options o;
  if (!parse_args(argc, argv, &o)) return 2;
  if ((o.threads > 1 || launched_with_ranks()) && o.gpus > 0) {
    std::fprintf(stderr,
                 "p2p_bandwidth: -g times the GPU pairs of one process; with -t or under a launcher it times rank "
                 "pairs on host memory. Run `p2p_bandwidth -g N` alone for GPU pairs.\n");
    return 2;
  }
  try {
    return o.threads > 1 || launched_with_ranks() ? run_ranks(o, argc, argv) : run_gpus(o);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "p2p_bandwidth: out of host memory for buffers of %zu bytes; use a smaller -e or -l\n",
                 std::max(o.sizes.back(), o.lat_bytes));
    return 2;
  }
}
