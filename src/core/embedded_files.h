// core/embedded_files.h — kernel templates and runtime headers, built in.
//
// Every file under templates/ and runtime/ is compiled into the library
// (cmake/EmbedFiles.cmake), keyed by its path relative to the source root,
// e.g. "runtime/cpu/tailor_cpu.h". JIT compilers serve #includes from this
// table, so an installed library never reads the source tree.
#ifndef TAILOR_CORE_EMBEDDED_FILES_H_
#define TAILOR_CORE_EMBEDDED_FILES_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/hash.h"

namespace tailor::internal {

struct EmbeddedFile {
  const char* path;
  const char* data;
  unsigned long size;
  absl::string_view contents() const { return {data, size}; }
};

// Defined in the generated embedded_files.cc, sorted by path.
extern const EmbeddedFile kEmbeddedFiles[];
extern const int kNumEmbeddedFiles;

inline absl::Span<const EmbeddedFile> EmbeddedFiles() {
  return {kEmbeddedFiles, static_cast<size_t>(kNumEmbeddedFiles)};
}

// Contents of the embedded file at `path`, or nullptr-data view if absent.
const EmbeddedFile* FindEmbeddedFile(absl::string_view path);

// Hash over the paths and contents of every embedded file whose path starts
// with one of `prefixes` (e.g. {"runtime/cpu/", "templates/cpu/"}).
Hash128 HashEmbeddedFiles(absl::Span<const absl::string_view> prefixes);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_EMBEDDED_FILES_H_
