// The training loop (train.hpp).
#include "trainer/train.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/data.hpp"
#include "trainer/metrics.hpp"
#include "trainer/model.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/tensorboard.hpp"

namespace accord::trainer {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sums of one logging interval or epoch, added up over ranks before printing.
struct Tally {
  double loss = 0, correct = 0, samples = 0;
  void add(double l, int c, int n) {
    loss += l * n;
    correct += c;
    samples += n;
  }
};

// Everything a run holds; its methods are the phases of train().
class Run {
 public:
  Run(const Options& o, GradSync& sync, const BackendFactory& factory)
      : o_(o), sync_(sync), factory_(factory), rank_(sync.rank()), nranks_(sync.nranks()) {}
  Status setup();
  Status loop(TrainResult* result);

 private:
  Status agree_on_start();
  Status evaluate(double* accuracy);
  Status report(const Tally& t, double dt, const SyncStats& comm0, const char* kind, double test_acc);
  Status save(int64_t epoch, int64_t step_in_epoch);
  void say(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  const Options& o_;
  GradSync& sync_;
  const BackendFactory& factory_;
  int rank_, nranks_;
  Dataset train_, test_;
  std::unique_ptr<Backend> backend_;
  Model* model_ = nullptr;      // backend_->model(): the host copy of the parameters
  Optimizer* opt_ = nullptr;    // backend_->optimizer(): the host copy of its state
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_layer_;
  int64_t epoch_ = 0, step_in_epoch_ = 0;
  MetricsLog metrics_;
  EventWriter events_;
  double last_loss_ = 0;
};

void Run::say(const char* fmt, ...) {
  if (rank_ != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

Status Run::setup() {
  openblas_set_num_threads(o_.threads > 0 ? o_.threads : default_blas_threads(nranks_));
  TRAINER_TRY(load_dataset(o_.dataset, o_.data, true, &train_));
  TRAINER_TRY(load_dataset(o_.dataset, o_.data, false, &test_));
  if (train_.shape.size() != test_.shape.size())
    return Status::error(o_.data + ": training and test images differ in size");
  std::unique_ptr<Model> model;
  TRAINER_TRY(Model::create(o_.model, train_.shape, train_.classes, &model));
  TRAINER_TRY(factory_(std::move(model), o_.opt, &backend_));
  model_ = &backend_->model();
  opt_ = &backend_->optimizer();
  buckets_ = make_buckets(model_->param_ranges(), static_cast<size_t>(o_.bucket_kb) * 1024);
  bucket_of_layer_.assign(model_->layers().size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) bucket_of_layer_[buckets_[b].ready_layer] = static_cast<int>(b);
  sync_.set_buckets(backend_->grads(), buckets_);
  sync_.set_device(backend_->device());
  if (rank_ == 0) {
    if (!o_.metrics.empty()) TRAINER_TRY(metrics_.open(o_.metrics, o_.resume));
    if (!o_.tensorboard.empty()) TRAINER_TRY(events_.open(o_.tensorboard));
    if (!o_.checkpoint.empty()) TRAINER_TRY(make_dirs(o_.checkpoint));
  }
  say("accord-train: %d rank%s, sync %s%s, OpenBLAS threads %d per rank\n", nranks_,
      nranks_ == 1 ? "" : "s", sync_.name().c_str(),
      sync_.name() == "accord" ? (o_.overlap ? " (overlapped with backward)" : " (after backward)") : "",
      openblas_get_num_threads());
  say("model %s on %s\n", model_->describe().c_str(), backend_->describe().c_str());
  std::string bl;
  for (const Bucket& b : buckets_) bl += (bl.empty() ? "" : ", ") + std::to_string(b.count * 4 / 1024) + " KiB";
  say("gradient buckets (backward order): %s\n", bl.c_str());
  say("data %s in %s: %zu training, %zu test samples; batch %d per rank, %d per step\n",
      o_.dataset.c_str(), o_.data.c_str(), train_.count(), test_.count(), o_.batch, o_.batch * nranks_);
  return agree_on_start();
}

Status Run::agree_on_start() {
  const std::span<float> params = model_->params();
  const size_t n = params.size();
  model_->init_params(o_.seed);
  // Header from rank 0: [resumed, ok, step, epoch, step_in_epoch]; the others add zeros.
  double header[5] = {0, 1, 0, 0, 0};
  std::string why;
  TrainState st;
  if (rank_ == 0 && o_.resume) {
    const std::string path = checkpoint_path(o_.checkpoint);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      say("no checkpoint at %s: starting from scratch\n", path.c_str());
    } else {
      std::fclose(f);
      header[0] = 1;
      Status s = load_checkpoint(path, &st);
      const int64_t global_batch = static_cast<int64_t>(o_.batch) * nranks_;
      if (s.ok() && (st.model != o_.model || st.dataset != o_.dataset || st.params.size() != n))
        s = Status::error(path + ": checkpoint is of model " + st.model + " on " + st.dataset + " (" +
                          std::to_string(st.params.size()) + " parameters), not --model " + o_.model +
                          " --dataset " + o_.dataset + " (" + std::to_string(n) + ")");
      if (s.ok() && (st.global_batch != global_batch || st.seed != o_.seed))
        s = Status::error(path + ": checkpoint was made with --seed " + std::to_string(st.seed) +
                          " and " + std::to_string(st.global_batch) + " samples per step; resume with " +
                          "the same seed and ranks x --batch (now " + std::to_string(o_.seed) + ", " +
                          std::to_string(global_batch) + ") to keep the data order");
      if (!s.ok()) {
        header[1] = 0;
        why = s.message();
      } else {
        header[2] = static_cast<double>(st.step);
        header[3] = static_cast<double>(st.epoch);
        header[4] = static_cast<double>(st.step_in_epoch);
      }
    }
  }
  if (rank_ != 0) header[1] = 0;  // sum() adds: only rank 0's flag counts
  TRAINER_TRY(sync_.sum(header, 5));
  if (header[1] == 0) return Status::error(rank_ == 0 ? why : "rank 0 could not load the checkpoint");
  if (header[0] != 0 && rank_ == 0) {
    std::copy(st.params.begin(), st.params.end(), params.begin());  // layers point into params
    opt_->m() = st.m;
    opt_->v() = st.v;
    opt_->ema() = st.ema;
  }
  // Every rank starts from rank 0's parameters (and optimizer state when resuming).
  TRAINER_TRY(sync_.broadcast(params.data(), n, 0));
  if (header[0] != 0) {
    TRAINER_TRY(sync_.broadcast(opt_->m().data(), n, 0));
    TRAINER_TRY(sync_.broadcast(opt_->v().data(), n, 0));
    TRAINER_TRY(sync_.broadcast(opt_->ema().data(), n, 0));
    opt_->set_step(static_cast<int64_t>(header[2]));
    epoch_ = static_cast<int64_t>(header[3]);
    step_in_epoch_ = static_cast<int64_t>(header[4]);
    say("resumed from %s at step %lld (epoch %lld, step %lld of it)\n", checkpoint_path(o_.checkpoint).c_str(),
        static_cast<long long>(opt_->step()), static_cast<long long>(epoch_ + 1),
        static_cast<long long>(step_in_epoch_));
  } else {
    opt_->reset_ema(params.data());
  }
  return backend_->push_state();
}

Status Run::evaluate(double* accuracy) {
  // Moving-average weights, as the seeds evaluate; the training weights come back after.
  TRAINER_TRY(backend_->use_ema(true));
  const size_t n = test_.count();
  const size_t begin = n * rank_ / nranks_, end = n * (rank_ + 1) / nranks_;
  const int k = model_->classes();
  double tally[2] = {0, static_cast<double>(end - begin)};
  for (size_t i = begin; i < end; i += o_.batch) {
    const int b = static_cast<int>(std::min<size_t>(o_.batch, end - i));
    const float* logits = nullptr;
    TRAINER_TRY(backend_->logits(test_.images.data() + i * test_.shape.size(), b, &logits));
    for (int j = 0; j < b; ++j) {
      const float* z = logits + static_cast<size_t>(j) * k;
      int best = 0;
      for (int c = 1; c < k; ++c)
        if (z[c] > z[best]) best = c;
      if (best == test_.labels[i + j]) tally[0] += 1;
    }
  }
  TRAINER_TRY(backend_->use_ema(false));
  TRAINER_TRY(sync_.sum(tally, 2));
  *accuracy = tally[1] > 0 ? tally[0] / tally[1] : 0.0;
  return ok_status();
}

Status Run::report(const Tally& t, double dt, const SyncStats& comm0, const char* kind, double test_acc) {
  const SyncStats c = sync_.stats();
  double sums[5] = {t.loss, t.correct, t.samples, c.comm_seconds - comm0.comm_seconds,
                    c.wait_seconds - comm0.wait_seconds};
  TRAINER_TRY(sync_.sum(sums, 5));
  if (rank_ != 0) return ok_status();
  const double loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  const double acc = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  const double rate = dt > 0 ? sums[2] / dt : 0.0;
  const double comm = dt > 0 ? sums[3] / nranks_ / dt : 0.0, wait = dt > 0 ? sums[4] / nranks_ / dt : 0.0;
  const int64_t step = opt_->step();
  last_loss_ = loss;
  const bool epoch_end = test_acc >= 0;
  std::printf("%s epoch %lld step %lld: loss %.4f accuracy %.4f lr %.2e | %.0f samples/s | comm %.0f%% "
              "of step time, %.0f%% not hidden",
              kind, static_cast<long long>(epoch_ + 1), static_cast<long long>(step), loss, acc,
              opt_->learning_rate(), rate, 100 * comm, 100 * wait);
  if (epoch_end) std::printf(" | test accuracy %.4f", test_acc);
  std::printf("\n");
  std::fflush(stdout);
  JsonLine line;
  line.add("epoch", epoch_ + 1).add("step", step).add("loss", loss).add("train_accuracy", acc)
      .add("lr", static_cast<double>(opt_->learning_rate())).add("samples_per_s", rate)
      .add("comm_share", comm).add("exposed_comm_share", wait);
  if (epoch_end) line.add("test_accuracy", test_acc);
  TRAINER_TRY(metrics_.write(line));
  if (events_.is_open()) {
    TRAINER_TRY(events_.scalar(epoch_end ? "epoch/train_loss" : "train/loss", static_cast<float>(loss), step));
    TRAINER_TRY(events_.scalar(epoch_end ? "epoch/train_accuracy" : "train/accuracy", static_cast<float>(acc), step));
    if (!epoch_end) {
      TRAINER_TRY(events_.scalar("train/learning_rate", opt_->learning_rate(), step));
      TRAINER_TRY(events_.scalar("perf/samples_per_s", static_cast<float>(rate), step));
      TRAINER_TRY(events_.scalar("perf/comm_share", static_cast<float>(comm), step));
    } else {
      TRAINER_TRY(events_.scalar("test/accuracy", static_cast<float>(test_acc), step));
    }
  }
  return ok_status();
}

Status Run::save(int64_t epoch, int64_t step_in_epoch) {
  if (rank_ != 0 || o_.checkpoint.empty()) return ok_status();
  TRAINER_TRY(backend_->pull_state());
  TrainState st;
  st.model = o_.model;
  st.dataset = o_.dataset;
  st.seed = o_.seed;
  st.step = opt_->step();
  st.epoch = epoch;
  st.step_in_epoch = step_in_epoch;
  st.global_batch = static_cast<int64_t>(o_.batch) * nranks_;
  st.params.assign(model_->params().begin(), model_->params().end());
  st.m = opt_->m();
  st.v = opt_->v();
  st.ema = opt_->ema();
  return save_checkpoint(checkpoint_path(o_.checkpoint), st);
}

Status Run::loop(TrainResult* result) {
  ShardSampler sampler(train_.count(), nranks_, o_.batch, o_.seed);
  const int64_t steps_per_epoch = static_cast<int64_t>(sampler.steps_per_epoch());
  if (steps_per_epoch == 0)
    return Status::error(o_.data + ": " + std::to_string(train_.count()) + " training samples are fewer than " +
                         "one step needs (" + std::to_string(o_.batch * nranks_) + " = ranks x --batch)");
  const size_t sample = train_.shape.size();
  std::vector<float> images(static_cast<size_t>(o_.batch) * sample);
  std::vector<uint8_t> labels(o_.batch);
  std::vector<uint32_t> idx;
  const auto on_layer = [this](size_t layer) {
    if (bucket_of_layer_[layer] >= 0) sync_.bucket_ready(static_cast<size_t>(bucket_of_layer_[layer]));
  };
  const auto run_start = Clock::now();
  const SyncStats run_comm0 = sync_.stats();
  const int64_t first_step = opt_->step();
  int64_t evaluated_at = -1;
  double test_acc = 0;
  bool stopped = false;
  for (; epoch_ < o_.epochs && !stopped; ++epoch_, step_in_epoch_ = 0) {
    Tally interval, epoch_tally;
    auto interval_start = Clock::now(), epoch_start = interval_start;
    SyncStats interval_comm = sync_.stats(), epoch_comm = interval_comm;
    for (; step_in_epoch_ < steps_per_epoch; ++step_in_epoch_) {
      if (o_.max_steps > 0 && opt_->step() >= o_.max_steps) {
        stopped = true;
        break;
      }
      sampler.indices(static_cast<int>(epoch_), static_cast<size_t>(step_in_epoch_), rank_, &idx);
      gather_batch(train_, idx, images.data(), labels.data());
      TRAINER_TRY(backend_->forward(images.data(), o_.batch));
      int correct = 0;
      float loss = 0;
      TRAINER_TRY(backend_->loss(labels.data(), o_.batch, &loss, &correct));
      TRAINER_TRY(backend_->backward(o_.batch, on_layer));
      TRAINER_TRY(sync_.finish());
      double l2_loss = 0;
      TRAINER_TRY(backend_->apply(&l2_loss));
      const double total_loss = loss + l2_loss;
      interval.add(total_loss, correct, o_.batch);
      epoch_tally.add(total_loss, correct, o_.batch);
      if (opt_->step() % o_.log_every == 0) {
        TRAINER_TRY(report(interval, seconds(interval_start, Clock::now()), interval_comm, "train", -1));
        interval = Tally();
        interval_start = Clock::now();
        interval_comm = sync_.stats();
      }
    }
    if (stopped) {
      TRAINER_TRY(save(epoch_, step_in_epoch_));
      break;
    }
    TRAINER_TRY(evaluate(&test_acc));
    evaluated_at = opt_->step();
    TRAINER_TRY(report(epoch_tally, seconds(epoch_start, Clock::now()), epoch_comm, "END", test_acc));
    TRAINER_TRY(save(epoch_ + 1, 0));
  }
  const double run_seconds = seconds(run_start, Clock::now());
  if (evaluated_at != opt_->step()) {
    TRAINER_TRY(evaluate(&test_acc));
    if (rank_ == 0) {
      TRAINER_TRY(metrics_.write(JsonLine().add("epoch", epoch_ + 1).add("step", opt_->step())
                                     .add("loss", last_loss_).add("test_accuracy", test_acc)));
      if (events_.is_open()) TRAINER_TRY(events_.scalar("test/accuracy", static_cast<float>(test_acc), opt_->step()));
    }
  }
  const SyncStats c = sync_.stats();
  double sums[2] = {c.comm_seconds - run_comm0.comm_seconds, c.wait_seconds - run_comm0.wait_seconds};
  TRAINER_TRY(sync_.sum(sums, 2));
  result->steps = opt_->step();
  result->test_accuracy = test_acc;
  result->last_loss = last_loss_;
  const double samples = static_cast<double>(opt_->step() - first_step) * o_.batch * nranks_;
  result->samples_per_s = run_seconds > 0 ? samples / run_seconds : 0;
  result->comm_share = run_seconds > 0 ? sums[0] / nranks_ / run_seconds : 0;
  result->exposed_comm_share = run_seconds > 0 ? sums[1] / nranks_ / run_seconds : 0;
  say("done: %lld steps, test accuracy %.4f (moving-average weights), %.0f samples/s, comm %.0f%% of "
      "training time (%.0f%% not hidden by backward)\n",
      static_cast<long long>(result->steps), test_acc, result->samples_per_s, 100 * result->comm_share,
      100 * result->exposed_comm_share);
  return ok_status();
}

}  // namespace

int default_blas_threads(int nranks) {
  int local = nranks;
  for (const char* var : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var); v != nullptr && std::atoi(v) > 0) {
      local = std::atoi(v);
      break;
    }
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local));
}

int local_rank() {
  for (const char* var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var); v != nullptr && std::atoi(v) >= 0 && *v != '\0') return std::atoi(v);
  }
  if (const char* v = std::getenv("RANK"); v != nullptr) return std::max(0, std::atoi(v));
  return 0;
}

Status train(const Options& options, GradSync& sync, TrainResult* result) {
  return train(options, sync, cpu_backend_factory(), result);
}

Status train(const Options& options, GradSync& sync, const BackendFactory& factory, TrainResult* result) {
  Run run(options, sync, factory);
  TRAINER_TRY(run.setup());
  return run.loop(result);
}

}  // namespace accord::trainer
