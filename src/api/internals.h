// api/internals.h — tailor's own access to the insides of its public types.
//
// The public headers (include/tailor/) show users only the stable API; op
// fronts, backends, tools and tests reach a Runtime's Engine and a
// workspace's implementation through these functions instead (the public
// types befriend Internals). Not installed, not a stable API.
//
// Example:
//   internal::Engine& engine = internal::EngineOf(runtime);
//   internal::MoeWorkspace* w = internal::WorkspaceImplOf(ws);  // or null
#ifndef TAILOR_API_INTERNALS_H_
#define TAILOR_API_INTERNALS_H_

#include "tailor/ops/attention.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

namespace tailor::internal {

struct Internals {
  static Engine& EngineOf(Runtime& runtime) { return *runtime.engine_; }
  static MoeWorkspace* ImplOf(const moe::Workspace& ws) {
    return ws.impl_.get();
  }
  static DecodeWorkspaceImpl* ImplOf(const attention::DecodeWorkspace& ws) {
    return ws.impl_.get();
  }
  static RaggedWorkspaceImpl* ImplOf(const attention::RaggedWorkspace& ws) {
    return ws.impl_.get();
  }
};

// The engine `runtime` is made of.
inline Engine& EngineOf(Runtime& runtime) {
  return Internals::EngineOf(runtime);
}

// A workspace's implementation; null before its first Reserve.
inline MoeWorkspace* WorkspaceImplOf(const moe::Workspace& ws) {
  return Internals::ImplOf(ws);
}
inline DecodeWorkspaceImpl* WorkspaceImplOf(
    const attention::DecodeWorkspace& ws) {
  return Internals::ImplOf(ws);
}
inline RaggedWorkspaceImpl* WorkspaceImplOf(
    const attention::RaggedWorkspace& ws) {
  return Internals::ImplOf(ws);
}

}  // namespace tailor::internal

#endif  // TAILOR_API_INTERNALS_H_
