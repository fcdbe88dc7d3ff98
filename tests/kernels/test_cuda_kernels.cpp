// CUDA kernels: (1) CudaKernels: launch every dtype x op on a GPU and compare with the host
// kernels bit for bit (skips without a usable GPU); (2) CudaFatbin: the built object and
// libaccord.so carry a cubin for every architecture the build asked for and PTX for the newest,
// every cubin with the same kernels (cuobjdump, from PyPI via scripts/setup.sh; skips without),
// and, read directly from the object's .nv_fatbin section, the same architectures. meson
// passes the files, the architectures and cuobjdump's folder.
#include <cuda_runtime_api.h>
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/kernels/cuda_kernels.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace accord::kernels {
namespace {

using testing::dtype_bytes;
using testing::dtype_name;
using testing::fill_random;
using testing::kAllDtypes;
using testing::kAllOps;
using testing::op_name;

bool have_gpu(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(p) + off; }
};

// offset: 0 (16-byte vectors), one element (element access), 1 byte (byte access).
void check_case(accord_datatype_t d, accord_red_op_t op, size_t n, size_t offset, bool b_null,
                bool dst1, int divisor, bool streaming) {
  SCOPED_TRACE(std::string(dtype_name(d)) + " " + op_name(op) + " n=" + std::to_string(n) +
               " offset=" + std::to_string(offset));
  const size_t bytes = n * dtype_bytes(d);
  std::vector<uint8_t> a(bytes), b(bytes), want(bytes), got(bytes), got1(bytes);
  fill_random(d, a.data(), n, n + 1);
  fill_random(d, b.data(), n, n + 2);
  ReduceArgs host;
  host.a = a.data();
  host.b = b_null ? nullptr : b.data();
  host.dst0 = want.data();
  host.count = n;
  host.divisor = divisor;
  get_reduce_fn(d, op)(host);

  DeviceBuffer da(bytes + 64), db(bytes + 64), d0(bytes + 64), d1(bytes + 64);
  ASSERT_EQ(cudaMemcpy(da.at(offset), a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db.at(offset), b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ReduceArgs dev = host;
  dev.a = da.at(offset);
  dev.b = b_null ? nullptr : db.at(offset);
  dev.dst0 = d0.at(offset);
  dev.dst1 = dst1 ? d1.at(offset) : nullptr;
  dev.dst0_streaming = streaming;
  ASSERT_EQ(cuda_reduce(dev, d, op, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), d0.at(offset), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, want);
  if (dst1) {
    ASSERT_EQ(cudaMemcpy(got1.data(), d1.at(offset), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got1, want);
  }
}

TEST(CudaKernels, MatchHostKernelsBitForBit) {
  std::string why;
  if (!have_gpu(&why)) GTEST_SKIP() << why;
  for (const accord_datatype_t d : kAllDtypes) {
    for (const accord_red_op_t op : kAllOps) {
      const int divisor = op == ACCORD_AVG ? 3 : 0;
      for (const size_t n : {size_t{1}, size_t{17}, size_t{4097}, size_t{1000003}}) {
        check_case(d, op, n, 0, false, false, divisor, false);
        check_case(d, op, n, dtype_bytes(d), false, true, divisor, true);
        if (dtype_bytes(d) > 1) check_case(d, op, n, 1, false, true, divisor, false);
        check_case(d, op, n, 0, true, false, 5, true);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(CudaKernels, RejectsBadArguments) {
  ReduceArgs args;
  args.count = 1;
  EXPECT_EQ(cuda_reduce(args, ACCORD_FLOAT32, ACCORD_SUM, nullptr), cudaErrorInvalidValue);
  args.count = 0;
  EXPECT_EQ(cuda_reduce(args, ACCORD_FLOAT32, ACCORD_SUM, nullptr), cudaSuccess);
}

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  *status = pclose(f);
  return out;
}

std::string find_cuobjdump() {
  const char* bin = getenv("ACCORD_TEST_CUDA_BIN");
  int status = 0;
  if (bin != nullptr) {
    const std::string p = std::string(bin) + "/cuobjdump";
    run("test -x '" + p + "'", &status);
    if (status == 0) return p;
  }
  const std::string p = run("command -v cuobjdump", &status);
  if (status == 0 && !p.empty()) return p.substr(0, p.find('\n'));
  return "";
}

// The files cuobjdump is run on: the nvcc object and the shared library it is linked into.
std::vector<std::string> fatbin_files() {
  std::vector<std::string> files;
  for (const char* var : {"ACCORD_TEST_CUDA_OBJECT", "ACCORD_TEST_CUDA_LIBRARY"}) {
    if (const char* f = getenv(var)) files.emplace_back(f);
  }
  return files;
}

TEST(CudaFatbin, HasEveryArchitecture) {
  const char* archs = getenv("ACCORD_TEST_CUDA_ARCHS");
  if (fatbin_files().size() != 2 || archs == nullptr) GTEST_SKIP() << "run through meson test";
  const std::string tool = find_cuobjdump();
  if (tool.empty()) GTEST_SKIP() << "cuobjdump not found (run scripts/setup.sh)";
  for (const std::string& file : fatbin_files()) {
    SCOPED_TRACE(file);
    int status = 0;
    const std::string elf = run("'" + tool + "' --list-elf '" + file + "' 2>&1", &status);
    ASSERT_EQ(status, 0) << elf;
    std::stringstream list(archs);
    std::string arch, newest;
    while (std::getline(list, arch, ',')) {
      EXPECT_NE(elf.find(".sm_" + arch + "."), std::string::npos) << "no sm_" << arch << ":\n"
                                                                  << elf;
      newest = arch;
    }
    const std::string ptx = run("'" + tool + "' --list-ptx '" + file + "' 2>&1", &status);
    ASSERT_EQ(status, 0) << ptx;
    EXPECT_NE(ptx.find("sm_" + newest), std::string::npos) << "no PTX for " << newest << ":\n"
                                                           << ptx;
  }
}

// The runtime finds a kernel in the cubin for the GPU by its mangled name, as the host stub
// registered it. The sm_70 cubin comes from a separate compile (ptx_to_sm70.sh), so a kernel
// named differently there, or missing, would fail only on a Volta GPU: compare the entry points
// of every cubin with those of the others.
TEST(CudaFatbin, EveryCubinHasTheSameKernels) {
  const char* object = getenv("ACCORD_TEST_CUDA_OBJECT");
  if (object == nullptr) GTEST_SKIP() << "run through meson test";
  const std::string tool = find_cuobjdump();
  if (tool.empty()) GTEST_SKIP() << "cuobjdump not found (run scripts/setup.sh)";
  int status = 0;
  const std::string out = run("'" + tool + "' -symbols '" + object + "' 2>&1", &status);
  ASSERT_EQ(status, 0) << out;
  std::map<std::string, std::set<std::string>> entries;  // arch -> kernel names
  std::string arch, line;
  std::stringstream lines(out);
  while (std::getline(lines, line)) {
    if (line.rfind("arch = ", 0) == 0) arch = line.substr(7);
    if (line.find("STO_ENTRY") == std::string::npos) continue;
    entries[arch].insert(line.substr(line.find_last_of(' ') + 1));
  }
  ASSERT_GE(entries.size(), 2u) << out.substr(0, 2000);
  const auto& [first_arch, first] = *entries.begin();
  EXPECT_GT(first.size(), 100u) << "one kernel per dtype x op x access, at least";
  for (const auto& [a, names] : entries) {
    EXPECT_EQ(names, first) << a << " and " << first_arch << " differ";
  }
}

// The fatbin layout (stable since CUDA 4, and what cuobjdump reads): a 16-byte header (magic
// 0xba55ed50, u16 version, u16 header size, u64 size of the entries), then entries, each with a
// header of u16 kind (1 PTX, 2 ELF cubin), u16 version, u32 header size, u64 payload size, ...,
// u32 architecture at byte 28 (75 for sm_75 / compute_75).
struct FatbinEntry {
  int kind;
  unsigned arch;
};

std::vector<FatbinEntry> read_fatbin_entries(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  const std::string obj((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<FatbinEntry> out;
  Elf64_Ehdr eh;
  if (obj.size() < sizeof eh) {
    *error = "cannot read " + path;
    return out;
  }
  memcpy(&eh, obj.data(), sizeof eh);
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shoff + static_cast<size_t>(eh.e_shnum) * sizeof(Elf64_Shdr) > obj.size()) {
    *error = path + " is not a 64-bit ELF object";
    return out;
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  memcpy(sh.data(), obj.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  const Elf64_Shdr& names = sh.at(eh.e_shstrndx);
  for (const Elf64_Shdr& s : sh) {
    const char* name = obj.data() + names.sh_offset + s.sh_name;
    if (strcmp(name, ".nv_fatbin") != 0 || s.sh_offset + s.sh_size > obj.size()) continue;
    const char* base = obj.data() + s.sh_offset;
    size_t off = 0;
    while (off + 16 <= s.sh_size) {
      uint32_t magic;
      uint16_t header;
      uint64_t size;
      memcpy(&magic, base + off, 4);
      memcpy(&header, base + off + 6, 2);
      memcpy(&size, base + off + 8, 8);
      if (magic != 0xba55ed50u) break;
      size_t p = off + header;
      const size_t end = p + size;
      while (p + 32 <= end && end <= s.sh_size) {
        uint16_t kind;
        uint32_t ehsize, arch;
        uint64_t payload;
        memcpy(&kind, base + p, 2);
        memcpy(&ehsize, base + p + 4, 4);
        memcpy(&payload, base + p + 8, 8);
        memcpy(&arch, base + p + 28, 4);
        out.push_back({kind, arch});
        p += ehsize + payload;
      }
      off = end;
    }
  }
  if (out.empty()) *error = "no .nv_fatbin entries in " + path;
  return out;
}

TEST(CudaFatbin, SectionHasEveryArchitecture) {
  const char* object = getenv("ACCORD_TEST_CUDA_OBJECT");
  const char* archs = getenv("ACCORD_TEST_CUDA_ARCHS");
  if (object == nullptr || archs == nullptr) GTEST_SKIP() << "run through meson test";
  std::string error;
  const std::vector<FatbinEntry> entries = read_fatbin_entries(object, &error);
  ASSERT_FALSE(entries.empty()) << error;
  const auto has = [&](int kind, unsigned arch) {
    for (const FatbinEntry& e : entries) {
      if (e.kind == kind && e.arch == arch) return true;
    }
    return false;
  };
  std::stringstream list(archs);
  std::string arch;
  unsigned newest = 0;
  while (std::getline(list, arch, ',')) {
    const unsigned a = static_cast<unsigned>(std::stoul(arch));
    EXPECT_TRUE(has(2, a)) << "no sm_" << a << " cubin";
    newest = a > newest ? a : newest;
  }
  EXPECT_TRUE(has(1, newest)) << "no compute_" << newest << " PTX";
}

}  // namespace
}  // namespace accord::kernels
