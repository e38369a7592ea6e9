#include "core/spec_key.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/disk_cache.h"

namespace tailor::internal {
namespace {

const OpInfo kInvalidOp = {"invalid", {}};

// A fixed-capacity byte buffer: hashing a key must not allocate. Fields are
// copied whole (little endian, the layout the golden hashes pin); writing
// byte by byte through char* made every store reload the size.
class KeyBytes {
 public:
  static_assert(std::endian::native == std::endian::little,
                "SpecKey serialization assumes a little-endian host");
  void Append(absl::string_view bytes) {
    std::memcpy(data_.data() + size_, bytes.data(), bytes.size());
    size_ += bytes.size();
  }
  template <typename T>
  void AppendLe(T value) {
    std::memcpy(data_.data() + size_, &value, sizeof(T));
    size_ += sizeof(T);
  }
  absl::string_view view() const { return {data_.data(), size_}; }

 private:
  std::array<char, 256> data_;
  size_t size_ = 0;
};

// The library's ops. Test kernels add theirs with RegisterOpKind.
constexpr std::pair<OpKind, OpInfo> kLibraryOps[] = {
    {OpKind::kMoePack, {"moe.pack", {"H"}}},
    {OpKind::kMoeGroupedGemm, {"moe.grouped_gemm", {"N", "K"}}},
    {OpKind::kMoeCombine, {"moe.combine", {"H", "topk"}}},
    {OpKind::kMoeRoute, {"moe.route", {"warps"}}},
    {OpKind::kAttentionDecode, {"attention.decode", {"D", "group", "page"}}},
    {OpKind::kAttentionDecodeMerge, {"attention.decode_merge", {"D", "group"}}},
    {OpKind::kAttentionRagged,
     {"attention.ragged", {"D", "group", "pack", "page", "mask"}}},
    {OpKind::kAttentionRaggedMerge, {"attention.ragged_merge", {"D", "pack"}}},
};

// Indexed by OpKind value: the library's ops, then registered ones.
using OpTable = std::array<std::atomic<const OpInfo*>, kNumOpKinds>;
OpTable& Ops() {
  static OpTable* const table = [] {
    auto* t = new OpTable();
    for (const auto& [op, info] : kLibraryOps) {
      (*t)[static_cast<size_t>(op)].store(&info);
    }
    return t;
  }();
  return *table;
}

}  // namespace

const OpInfo& GetOpInfo(OpKind op) {
  const size_t index = static_cast<size_t>(op);
  if (index >= kNumOpKinds) return kInvalidOp;
  const OpInfo* info = Ops()[index].load(std::memory_order_acquire);
  return info != nullptr ? *info : kInvalidOp;
}

OpKind OpKindFromName(absl::string_view name) {
  if (name == kInvalidOp.name) return OpKind::kInvalid;
  for (int i = 1; i < kNumOpKinds; ++i) {
    OpKind op = static_cast<OpKind>(i);
    if (GetOpInfo(op).name == name) return op;
  }
  return OpKind::kInvalid;
}

absl::Status RegisterOpKind(OpKind op, const OpInfo* info) {
  const size_t index = static_cast<size_t>(op);
  if (index == 0 || index >= kNumOpKinds) {
    return absl::InvalidArgumentError(
        absl::StrCat("op: must be in [1, ", kNumOpKinds, "), got ", index));
  }
  for (const auto& [library_op, library_info] : kLibraryOps) {
    if (library_op == op) {
      return absl::InvalidArgumentError(
          absl::StrCat("op ", index, ": is the library's ", library_info.name));
    }
  }
  const OpInfo* expected = nullptr;
  if (!Ops()[index].compare_exchange_strong(expected, info) &&
      expected->name != info->name) {
    return absl::InvalidArgumentError(
        absl::StrCat("op ", index, ": already registered as ", expected->name));
  }
  return absl::OkStatus();
}

SpecKey KeyTarget::MakeKey(OpKind op) const {
  SpecKey key;
  key.op = op;
  key.backend = backend;
  key.SetArch(arch);
  return key;
}

void SpecKey::SetArch(absl::string_view arch_name) {
  arch.fill('\0');
  std::copy_n(arch_name.begin(),
              std::min<size_t>(arch_name.size(), kMaxArchLength), arch.begin());
}

absl::string_view SpecKey::arch_name() const {
  return absl::string_view(arch.data());
}

Hash128 SpecKey::Hash() const {
  // Canonical serialization: fixed order, fixed widths, little endian.
  KeyBytes bytes;  // 17 + 2 + 1 + 32 + 4 + 48 + 8 + 24 + 4 = 140 bytes
  bytes.Append("tailor.speckey.v1");
  bytes.AppendLe(static_cast<uint16_t>(op));
  bytes.AppendLe(static_cast<uint8_t>(backend));
  bytes.Append(absl::string_view(arch.data(), arch.size()));
  for (DType d : dtypes) bytes.AppendLe(static_cast<uint8_t>(d));
  for (int64_t d : dims) bytes.AppendLe(static_cast<uint64_t>(d));
  bytes.AppendLe(static_cast<uint32_t>(bucket_id));
  bytes.AppendLe(static_cast<uint32_t>(tail_class));
  for (int32_t t :
       {tile.m, tile.n, tile.k, tile.stages, tile.warps, tile.cluster}) {
    bytes.AppendLe(static_cast<uint32_t>(t));
  }
  bytes.AppendLe(variant);
  return HashBytes(bytes.view());
}

std::string SpecKey::ToString() const {
  const OpInfo& info = GetOpInfo(op);
  std::string out =
      absl::StrCat(info.name, "/", BackendName(backend), "/", arch_name(), "/");
  bool first = true;
  for (DType d : dtypes) {
    if (static_cast<int>(d) == 0) continue;
    absl::StrAppend(&out, first ? "" : ",", DTypeName(d));
    first = false;
  }
  out.push_back('/');
  first = true;
  for (int i = 0; i < kMaxSpecDims; ++i) {
    if (info.dim_names[i].empty() && dims[i] == 0) continue;
    absl::string_view name =
        info.dim_names[i].empty() ? "d" : info.dim_names[i];
    absl::StrAppend(&out, first ? "" : ",", name, "=", dims[i]);
    first = false;
  }
  absl::StrAppend(&out, "/b", bucket_id, "/t", tail_class, "/m", tile.m, "n",
                  tile.n, "k", tile.k);
  if (tile.stages) absl::StrAppend(&out, "s", tile.stages);
  if (tile.warps) absl::StrAppend(&out, "w", tile.warps);
  if (tile.cluster) absl::StrAppend(&out, "c", tile.cluster);
  if (variant) absl::StrAppend(&out, "/v", variant);
  return out;
}

// The disk cache owns the stem rule: the tools rebuild an entry's name from
// the spec string in its header, so both must go through EntryFileStem.
std::string SpecKey::FileStem() const { return EntryFileStem(ToString()); }

}  // namespace tailor::internal
