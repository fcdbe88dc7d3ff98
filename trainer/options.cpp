// Command-line parsing for accord-train (options.hpp). A table of flags keeps the parser and
// the --help text in step.
#include "trainer/options.hpp"

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <vector>

namespace accord::trainer {

namespace {

struct Flag {
  const char* name;
  const char* arg;  // nullptr: a switch without a value
  const char* help;
  std::function<Status(Options*, const std::string&)> set;
};

Status parse_int(const std::string& flag, const std::string& v, int64_t min, int64_t max, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min || x > max)
    return Status::error("--" + flag + ": '" + v + "' is not an integer in [" + std::to_string(min) +
                         ", " + std::to_string(max) + "]");
  *out = x;
  return ok_status();
}

Status parse_float(const std::string& flag, const std::string& v, double min, double max, float* out) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !(x >= min && x <= max))
    return Status::error("--" + flag + ": '" + v + "' is not a number in [" + std::to_string(min) +
                         ", " + std::to_string(max) + "]");
  *out = static_cast<float>(x);
  return ok_status();
}

template <typename T>
std::function<Status(Options*, const std::string&)> int_flag(const char* name, T Options::*field,
                                                              int64_t min, int64_t max) {
  return [=](Options* o, const std::string& v) {
    int64_t x = 0;
    TRAINER_TRY(parse_int(name, v, min, max, &x));
    o->*field = static_cast<T>(x);
    return ok_status();
  };
}

std::function<Status(Options*, const std::string&)> float_flag(const char* name,
                                                                float OptimizerConfig::*field,
                                                                double min, double max) {
  return [=](Options* o, const std::string& v) { return parse_float(name, v, min, max, &(o->opt.*field)); };
}

std::function<Status(Options*, const std::string&)> choice_flag(const char* name,
                                                                 std::string Options::*field,
                                                                 std::vector<std::string> choices) {
  return [=](Options* o, const std::string& v) {
    std::string list;
    for (const std::string& c : choices) {
      if (v == c) {
        o->*field = v;
        return ok_status();
      }
      list += (list.empty() ? "" : ", ") + c;
    }
    return Status::error("--" + std::string(name) + ": '" + v + "' is not one of " + list);
  };
}

std::function<Status(Options*, const std::string&)> string_flag(std::string Options::*field) {
  return [=](Options* o, const std::string& v) {
    o->*field = v;
    return ok_status();
  };
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> kFlags = {
      {"data", "DIR", "dataset directory (default /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)",
       string_flag(&Options::data)},
      {"dataset", "NAME", "fashion-mnist (default), mnist (IDX files) or cifar10 (binary batches)",
       choice_flag("dataset", &Options::dataset, {"fashion-mnist", "mnist", "cifar10"})},
      {"model", "NAME", "cnn (LeNet-5: conv5x5x32, pool, conv5x5x64, pool, fc512, fc10; default) or mlp",
       choice_flag("model", &Options::model, {"cnn", "mlp"})},
      {"epochs", "N", "epochs to train (default 3)", int_flag("epochs", &Options::epochs, 1, 100000)},
      {"batch", "B", "samples per rank per step (default 64)", int_flag("batch", &Options::batch, 1, 65536)},
      {"lr", "X", "base learning rate of Adam (default 0.001)", float_flag("lr", &OptimizerConfig::lr, 1e-9, 10)},
      {"lr-decay", "X", "learning rate factor per --lr-decay-steps steps (default 0.99)",
       float_flag("lr-decay", &OptimizerConfig::lr_decay, 1e-6, 1)},
      {"lr-decay-steps", "N", "steps over which the rate decays by --lr-decay (default 64)",
       [](Options* o, const std::string& v) {
         int64_t x = 0;
         TRAINER_TRY(parse_int("lr-decay-steps", v, 1, 1 << 30, &x));
         o->opt.lr_decay_steps = static_cast<int>(x);
         return ok_status();
       }},
      {"l2", "X", "L2 regularisation rate of the weights (default 0.0001)", float_flag("l2", &OptimizerConfig::l2, 0, 1)},
      {"ema-decay", "X", "decay of the weights' moving average used for evaluation (default 0.99)",
       float_flag("ema-decay", &OptimizerConfig::ema_decay, 0, 1)},
      {"sync", "MODE", "accord (all-reduce per bucket, overlapped with backward; default) or host-average "
                       "(the seeds' method: gather to rank 0, average on its CPU, broadcast back)",
       choice_flag("sync", &Options::sync, {"accord", "host-average"})},
      {"no-overlap", nullptr, "accord mode: start all-reduces only after the whole backward",
       [](Options* o, const std::string&) {
         o->overlap = false;
         return ok_status();
       }},
      {"bucket-kb", "N", "gradient bucket size in KiB (default 256)", int_flag("bucket-kb", &Options::bucket_kb, 1, 1 << 20)},
      {"metrics", "FILE", "write metrics as JSON lines (epoch, step, loss; test_accuracy at epoch ends)",
       string_flag(&Options::metrics)},
      {"tensorboard", "DIR", "write TensorBoard scalars to an event file in DIR", string_flag(&Options::tensorboard)},
      {"checkpoint", "DIR", "save a checkpoint in DIR after every epoch and when stopping", string_flag(&Options::checkpoint)},
      {"resume", nullptr, "continue from the checkpoint in --checkpoint DIR (fresh start if there is none)",
       [](Options* o, const std::string&) {
         o->resume = true;
         return ok_status();
       }},
      {"max-steps", "N", "stop after N steps in total (0: no limit; default 0)",
       int_flag("max-steps", &Options::max_steps, 0, int64_t{1} << 40)},
      {"seed", "N", "seed of initial weights and data order (default 1)",
       [](Options* o, const std::string& v) {
         int64_t x = 0;
         TRAINER_TRY(parse_int("seed", v, 0, INT64_MAX, &x));
         o->seed = static_cast<uint64_t>(x);
         return ok_status();
       }},
      {"log-every", "N", "progress line and metrics every N steps (default 50)",
       int_flag("log-every", &Options::log_every, 1, 1 << 30)},
      {"threads", "N", "OpenBLAS threads per rank (default: cores / ranks on this host)",
       int_flag("threads", &Options::threads, 0, 1024)},
      {"device", "DEV", "cpu (OpenBLAS; default) or gpu (cuDNN + cuBLAS; each rank uses GPU local rank % GPUs; "
                        "needs a build with CUDA, cuBLAS and cuDNN)",
       choice_flag("device", &Options::device, {"cpu", "gpu"})},
      {"help", nullptr, "show this help",
       [](Options* o, const std::string&) {
         o->help = true;
         return ok_status();
       }},
  };
  return kFlags;
}

}  // namespace

std::string usage() {
  std::string s =
      "usage: accord-train [flags]\n"
      "Data-parallel training with gradients averaged by Accord. Runs as one process, under\n"
      "mpirun (-np N), or as N processes started with RANK, WORLD_SIZE, MASTER_ADDR and\n"
      "MASTER_PORT (torchrun style).\n\nflags:\n";
  for (const Flag& f : flags()) {
    std::string left = std::string("  --") + f.name + (f.arg ? std::string(" ") + f.arg : "");
    if (left.size() < 24) left.resize(24, ' ');
    s += left + " " + f.help + "\n";
  }
  return s;
}

Status parse_options(int argc, const char* const* argv, Options* out) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0)
      return Status::error("unexpected argument '" + a + "' (flags start with --; see --help)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags())
      if (name == f.name) flag = &f;
    if (flag == nullptr) return Status::error("unknown flag --" + name + " (see --help)");
    if (flag->arg == nullptr) {
      if (has_value) return Status::error("--" + name + " takes no value");
    } else if (!has_value) {
      if (i + 1 >= argc) return Status::error("--" + name + " needs a value (" + flag->arg + ")");
      value = argv[++i];
    }
    TRAINER_TRY(flag->set(out, value));
  }
  if (out->resume && out->checkpoint.empty())
    return Status::error("--resume needs --checkpoint DIR (where the checkpoint is)");
  return ok_status();
}

}  // namespace accord::trainer
