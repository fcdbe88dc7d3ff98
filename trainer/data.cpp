// Dataset readers and the shard sampler (see data.hpp). Every failure names the file and
// says what is wrong with it (missing, not gzip/IDX, truncated, counts that disagree).
#include "trainer/data.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>

namespace accord::trainer {

namespace {

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads a whole file, gunzipping it when it is gzip (zlib reads plain files as they are).
Status read_file(const std::string& path, std::vector<uint8_t>* out) {
  if (!file_exists(path)) {
    const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    return Status::error(path + ": no such file" + (gz ? " (nor without .gz)" : "") +
                         "; pass --data DIR with the dataset's files (Fashion-MNIST: "
                         "apt-get install dataset-fashion-mnist, or run scripts/setup.sh)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::error(path + ": cannot open: " + std::strerror(errno));
  out->clear();
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      return Status::error(path + ": corrupt gzip data (" + why + ")");
    }
    if (n == 0) break;
    out->insert(out->end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short reads as a clean end in some zlib versions; gzclose reports it.
  const int rc = gzclose(f);
  if (rc != Z_OK)
    return Status::error(path + ": corrupt or truncated gzip data (zlib error " +
                         std::to_string(rc) + ")");
  return ok_status();
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// "x" or "x.gz", whichever exists (the plain name when neither does, for the error).
std::string pick(const std::string& dir, const std::string& name) {
  const std::string plain = dir + "/" + name;
  if (file_exists(plain)) return plain;
  if (file_exists(plain + ".gz")) return plain + ".gz";
  return plain + ".gz";
}

}  // namespace

Status load_idx(const std::string& images_path, const std::string& labels_path, float mean,
                float stddev, Dataset* out) {
  std::vector<uint8_t> img, lab;
  TRAINER_TRY(read_file(images_path, &img));
  TRAINER_TRY(read_file(labels_path, &lab));
  if (img.size() < 16 || be32(img.data()) != 0x803)
    return Status::error(images_path + ": not an IDX image file (expected magic 0x00000803 and a " +
                         "16-byte header; is it an images file?)");
  if (lab.size() < 8 || be32(lab.data()) != 0x801)
    return Status::error(labels_path + ": not an IDX label file (expected magic 0x00000801 and an " +
                         "8-byte header; is it a labels file?)");
  const uint32_t n = be32(img.data() + 4), rows = be32(img.data() + 8), cols = be32(img.data() + 12);
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096)
    return Status::error(images_path + ": implausible image size " + std::to_string(rows) + "x" +
                         std::to_string(cols));
  const size_t pixels = static_cast<size_t>(rows) * cols;
  if (img.size() != 16 + pixels * n)
    return Status::error(images_path + ": header says " + std::to_string(n) + " images of " +
                         std::to_string(rows) + "x" + std::to_string(cols) + " (" +
                         std::to_string(16 + pixels * n) + " bytes) but the file has " +
                         std::to_string(img.size()) + " bytes (truncated or corrupt)");
  const uint32_t nl = be32(lab.data() + 4);
  if (lab.size() != 8 + static_cast<size_t>(nl))
    return Status::error(labels_path + ": header says " + std::to_string(nl) +
                         " labels but the file has " + std::to_string(lab.size() - 8) +
                         " label bytes (truncated or corrupt)");
  if (nl != n)
    return Status::error(labels_path + ": " + std::to_string(nl) + " labels for " +
                         std::to_string(n) + " images in " + images_path);
  if (n == 0) return Status::error(images_path + ": holds no images");
  out->shape = Shape{1, static_cast<int>(rows), static_cast<int>(cols)};
  out->classes = 10;
  out->labels.assign(lab.begin() + 8, lab.end());
  for (size_t i = 0; i < n; ++i)
    if (out->labels[i] >= 10)
      return Status::error(labels_path + ": label " + std::to_string(out->labels[i]) +
                           " of sample " + std::to_string(i) + " is not in 0..9");
  out->images.resize(pixels * n);
  const float scale = 1.0f / (255.0f * stddev), shift = mean / stddev;
  for (size_t i = 0; i < pixels * n; ++i) out->images[i] = img[16 + i] * scale - shift;
  return ok_status();
}

Status load_cifar10(const std::vector<std::string>& paths, Dataset* out) {
  constexpr size_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;
  // Per-channel mean and standard deviation of the CIFAR-10 training set.
  constexpr float kMean[3] = {0.4914f, 0.4822f, 0.4465f};
  constexpr float kStd[3] = {0.2470f, 0.2435f, 0.2616f};
  out->shape = Shape{3, 32, 32};
  out->classes = 10;
  out->images.clear();
  out->labels.clear();
  std::vector<uint8_t> raw;
  for (const std::string& path : paths) {
    TRAINER_TRY(read_file(path, &raw));
    if (raw.empty() || raw.size() % kRecord != 0)
      return Status::error(path + ": " + std::to_string(raw.size()) +
                           " bytes is not a whole number of CIFAR-10 records (3073 bytes each: " +
                           "label byte + 3x32x32 pixels); truncated or not a CIFAR-10 batch");
    const size_t n = raw.size() / kRecord;
    const size_t base = out->images.size();
    out->images.resize(base + n * kPixels);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* rec = raw.data() + i * kRecord;
      if (rec[0] >= 10)
        return Status::error(path + ": record " + std::to_string(i) + " has label " +
                             std::to_string(rec[0]) + ", not in 0..9 (not a CIFAR-10 batch?)");
      out->labels.push_back(rec[0]);
      float* dst = out->images.data() + base + i * kPixels;
      for (size_t p = 0; p < kPixels; ++p) {
        const int c = static_cast<int>(p / 1024);
        dst[p] = (rec[1 + p] / 255.0f - kMean[c]) / kStd[c];
      }
    }
  }
  return ok_status();
}

Status load_dataset(const std::string& dataset, const std::string& dir, bool train,
                    Dataset* out) {
  if (dataset == "fashion-mnist" || dataset == "mnist") {
    const bool fashion = dataset == "fashion-mnist";
    const float mean = fashion ? 0.2860f : 0.1307f, stddev = fashion ? 0.3530f : 0.3081f;
    const std::string prefix = train ? "train" : "t10k";
    return load_idx(pick(dir, prefix + "-images-idx3-ubyte"), pick(dir, prefix + "-labels-idx1-ubyte"),
                    mean, stddev, out);
  }
  if (dataset == "cifar10") {
    std::string base = dir;
    if (!file_exists(base + "/test_batch.bin") && file_exists(base + "/cifar-10-batches-bin/test_batch.bin"))
      base += "/cifar-10-batches-bin";
    std::vector<std::string> paths;
    if (train) {
      for (int i = 1; i <= 5; ++i) paths.push_back(base + "/data_batch_" + std::to_string(i) + ".bin");
    } else {
      paths.push_back(base + "/test_batch.bin");
    }
    return load_cifar10(paths, out);
  }
  return Status::error("unknown dataset '" + dataset + "' (expected fashion-mnist, mnist or cifar10)");
}

ShardSampler::ShardSampler(size_t samples, int nranks, int batch, uint64_t seed)
    : samples_(samples), nranks_(nranks), batch_(batch), seed_(seed) {}

void ShardSampler::indices(int epoch, size_t step, int rank, std::vector<uint32_t>* out) {
  if (epoch != perm_epoch_) {
    // Fisher-Yates with our own generator: the same order on every rank, machine and
    // standard library, and recomputable from (seed, epoch) when resuming.
    perm_.resize(samples_);
    for (size_t i = 0; i < samples_; ++i) perm_[i] = static_cast<uint32_t>(i);
    Rng rng(seed_ ^ (0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(epoch) + 1)));
    for (size_t i = samples_; i > 1; --i) {
      const size_t j = rng.next() % i;
      std::swap(perm_[i - 1], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  const size_t start = (step * nranks_ + rank) * static_cast<size_t>(batch_);
  out->assign(perm_.begin() + start, perm_.begin() + start + batch_);
}

void gather_batch(const Dataset& data, const std::vector<uint32_t>& indices, float* images,
                  uint8_t* labels) {
  const size_t n = data.shape.size();
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(images + i * n, data.images.data() + static_cast<size_t>(indices[i]) * n,
                sizeof(float) * n);
    labels[i] = data.labels[indices[i]];
  }
}

}  // namespace accord::trainer
