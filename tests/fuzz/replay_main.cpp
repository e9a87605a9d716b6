// main() for the fuzz targets in ordinary builds (no libFuzzer): runs every
// input file named on the command line, or found in a directory named
// there, through LLVMFuzzerTestOneInput once.  So every corpus seed and
// every regression input under tests/fuzz/ is run by each build's own
// tests (suite 'security'), sanitizers included, not only by the fuzzer.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

bool run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", p.c_str());
    return false;
  }
  const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  size_t files = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> found;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg, ec))
        if (e.is_regular_file() && e.path().filename().native()[0] != '.') found.push_back(e.path());
      std::sort(found.begin(), found.end());
      for (const auto& f : found) {
        ok = run_file(f) && ok;
        ++files;
      }
    } else {
      ok = run_file(arg) && ok;
      ++files;
    }
  }
  std::printf("fuzz replay: %zu inputs, no crash\n", files);
  if (files == 0) {
    std::fprintf(stderr, "fuzz replay: no inputs found\n");
    return 1;
  }
  return ok ? 0 : 1;
}
