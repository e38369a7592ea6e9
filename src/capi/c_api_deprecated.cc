// The C ABI's deprecated names (tailor/c_api.h, end): exported entries that
// forward to the names of the one scheme every family follows. Kept for one
// ABI version: this file goes when TAILOR_C_API_VERSION reaches 4.
#include "tailor/c_api.h"

extern "C" {

tailor_status tailor_moe_reserve_workspace(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    tailor_moe_workspace* ws) {
  return tailor_moe_workspace_reserve(runtime, limits, ws);
}

tailor_status tailor_moe_bind_workspace(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    void* memory, int64_t bytes, tailor_moe_workspace* ws, void* stream) {
  return tailor_moe_workspace_bind(runtime, limits, memory, bytes, ws, stream);
}

tailor_status tailor_moe_take_routing_errors(tailor_runtime* runtime,
                                             tailor_moe_workspace* ws,
                                             void* stream) {
  return tailor_moe_workspace_take_errors(runtime, ws, stream);
}

tailor_status tailor_decode_workspace_create(
    tailor_attention_decode_workspace** out) {
  return tailor_attention_decode_workspace_create(out);
}

void tailor_decode_workspace_destroy(tailor_attention_decode_workspace* ws) {
  tailor_attention_decode_workspace_destroy(ws);
}

tailor_status tailor_attention_reserve_decode_workspace(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    tailor_attention_decode_workspace* ws) {
  return tailor_attention_decode_workspace_reserve(runtime, limits, ws);
}

tailor_status tailor_attention_bind_decode_workspace(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    void* memory, int64_t bytes, tailor_attention_decode_workspace* ws,
    void* stream) {
  return tailor_attention_decode_workspace_bind(runtime, limits, memory, bytes,
                                                ws, stream);
}

tailor_status tailor_attention_take_decode_errors(
    tailor_runtime* runtime, tailor_attention_decode_workspace* ws,
    void* stream) {
  return tailor_attention_decode_workspace_take_errors(runtime, ws, stream);
}

tailor_status tailor_decode_workspace_get_info(
    const tailor_attention_decode_workspace* ws,
    tailor_attention_decode_workspace_info* out) {
  return tailor_attention_decode_workspace_get_info(ws, out);
}

tailor_status tailor_attention_plan_decode(
    tailor_runtime* runtime, const tailor_attention_decode_plan_args* args,
    tailor_attention_decode_workspace* ws) {
  return tailor_attention_decode_plan(runtime, args, ws);
}

tailor_status tailor_attention_run_decode(
    tailor_runtime* runtime, const tailor_attention_decode_run_args* args,
    tailor_attention_decode_workspace* ws) {
  return tailor_attention_decode_run(runtime, args, ws);
}

}  // extern "C"
