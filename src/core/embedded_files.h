// core/embedded_files.h — kernel templates and runtime headers, built in.
//
// Every file under templates/ and runtime/ is compiled into the library
// (cmake/EmbedFiles.cmake), keyed by its path relative to the source root,
// e.g. "runtime/cpu/tailor_cpu.h". JIT compilers serve #includes from this
// table, so an installed library never reads the source tree.
//
// Test-only kernel templates are not in the library's table: embedded there,
// they would be hashed into every user's cache key, so editing one would
// invalidate everyone's cache. Test binaries add them with
// RegisterEmbeddedFiles (tests/kernels/) before any Runtime is created.
#ifndef TAILOR_CORE_EMBEDDED_FILES_H_
#define TAILOR_CORE_EMBEDDED_FILES_H_

#include <vector>

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

// Adds `files` (which must live for the process) to the table: for test
// kernel templates only. Call before any Runtime is created, e.g. from a
// static initializer of a test library, so that backends hash them into the
// identity of every disk-cache entry (headers_hash). Thread-safe.
void RegisterEmbeddedFiles(absl::Span<const EmbeddedFile> files);

// The library's files, then every registered file, in registration order.
std::vector<EmbeddedFile> EmbeddedFiles();

// Contents of the embedded file at `path`, or nullptr-data view if absent.
const EmbeddedFile* FindEmbeddedFile(absl::string_view path);

// Hash over the paths and contents of every embedded file whose path starts
// with one of `prefixes` (e.g. {"runtime/cpu/", "templates/cpu/"}).
Hash128 HashEmbeddedFiles(absl::Span<const absl::string_view> prefixes);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_EMBEDDED_FILES_H_
