#include "core/embedded_files.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tailor::internal {

const EmbeddedFile* FindEmbeddedFile(absl::string_view path) {
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    if (path == file.path) return &file;
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
