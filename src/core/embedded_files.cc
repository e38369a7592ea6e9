#include "core/embedded_files.h"

#include <algorithm>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tailor::internal {
namespace {

struct Registered {
  absl::Mutex mu;
  std::vector<absl::Span<const EmbeddedFile>> tables ABSL_GUARDED_BY(mu);
};

Registered& RegisteredTables() {
  static Registered* registered = new Registered;
  return *registered;
}

}  // namespace

void RegisterEmbeddedFiles(absl::Span<const EmbeddedFile> files) {
  Registered& registered = RegisteredTables();
  absl::MutexLock lock(&registered.mu);
  registered.tables.push_back(files);
}

std::vector<EmbeddedFile> EmbeddedFiles() {
  std::vector<EmbeddedFile> files(kEmbeddedFiles,
                                  kEmbeddedFiles + kNumEmbeddedFiles);
  Registered& registered = RegisteredTables();
  absl::MutexLock lock(&registered.mu);
  for (absl::Span<const EmbeddedFile> table : registered.tables) {
    files.insert(files.end(), table.begin(), table.end());
  }
  return files;
}

const EmbeddedFile* FindEmbeddedFile(absl::string_view path) {
  for (int i = 0; i < kNumEmbeddedFiles; ++i) {
    if (path == kEmbeddedFiles[i].path) return &kEmbeddedFiles[i];
  }
  Registered& registered = RegisteredTables();
  absl::MutexLock lock(&registered.mu);
  for (absl::Span<const EmbeddedFile> table : registered.tables) {
    for (const EmbeddedFile& file : table) {
      if (path == file.path) return &file;
    }
  }
  return nullptr;
}

Hash128 HashEmbeddedFiles(absl::Span<const absl::string_view> prefixes) {
  Hasher hasher;
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    bool selected = std::any_of(
        prefixes.begin(), prefixes.end(),
        [&](absl::string_view p) { return absl::StartsWith(file.path, p); });
    if (!selected) continue;
    hasher.Add(file.path).Add(file.contents());
  }
  return hasher.Finish();
}

}  // namespace tailor::internal
