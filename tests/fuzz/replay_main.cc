// The fuzz targets without libFuzzer (any compiler): runs LLVMFuzzerTestOneInput once per file
// named on the command line, or per file in a directory named there. ctest -L unit replays the
// generated seeds and the checked-in reproducers this way; a broken invariant aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "fuzz_check.h"

namespace {

namespace fs = std::filesystem;

void replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  // Exactly the file's size on the heap, so that a sanitized build sees a read past the end,
  // and never a null pointer (libFuzzer passes none, even for an empty input).
  const auto input = std::make_unique<std::uint8_t[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), input.get());
  (void)LLVMFuzzerTestOneInput(input.get(), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::vector<fs::path> files;
    if (fs::is_directory(arg)) {
      for (const auto& e : fs::directory_iterator(arg)) {
        if (e.is_regular_file()) {
          files.push_back(e.path());
        }
      }
      std::sort(files.begin(), files.end());  // the same order on every run
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 1;
    }
    for (const auto& f : files) {
      replay(f);
    }
    replayed += files.size();
  }
  std::printf("replayed %zu inputs\n", replayed);
  // No input at all means the seed step did not run: a pass would test nothing.
  return replayed == 0 ? 1 : 0;
}
