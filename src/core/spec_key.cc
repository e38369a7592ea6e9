#include "core/spec_key.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

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

}  // namespace

const OpInfo& GetOpInfo(OpKind op) {
  static const OpInfo kTestEmpty = {"test.empty", {}};
  static const OpInfo kTestAxpy = {"test.axpy", {}};
  static const OpInfo kMoePack = {"moe.pack", {"H"}};
  static const OpInfo kMoeGroupedGemm = {"moe.grouped_gemm", {"N", "K"}};
  static const OpInfo kMoeCombine = {"moe.combine", {"H", "topk"}};
  static const OpInfo kMoeRoute = {"moe.route", {"warps"}};
  static const OpInfo kAttentionDecode = {"attention.decode",
                                          {"D", "group", "page"}};
  static const OpInfo kAttentionDecodeMerge = {"attention.decode_merge",
                                               {"D", "group"}};
  static const OpInfo kTmaPatchTest = {"tma.patch_test", {"cols"}};
  static const OpInfo kTmaCopyTest = {"tma.copy_test", {"cols"}};
  switch (op) {
    case OpKind::kInvalid:
      return kInvalidOp;
    case OpKind::kTestEmpty:
      return kTestEmpty;
    case OpKind::kTestAxpy:
      return kTestAxpy;
    case OpKind::kMoePack:
      return kMoePack;
    case OpKind::kMoeGroupedGemm:
      return kMoeGroupedGemm;
    case OpKind::kMoeCombine:
      return kMoeCombine;
    case OpKind::kMoeRoute:
      return kMoeRoute;
    case OpKind::kAttentionDecode:
      return kAttentionDecode;
    case OpKind::kAttentionDecodeMerge:
      return kAttentionDecodeMerge;
    case OpKind::kTmaPatchTest:
      return kTmaPatchTest;
    case OpKind::kTmaCopyTest:
      return kTmaCopyTest;
  }
  return kInvalidOp;
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

std::string SpecKey::FileStem() const {
  std::string stem = ToString();
  for (char& c : stem) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!safe) c = '_';
  }
  if (stem.size() > 120) stem.resize(120);
  return stem;
}

}  // namespace tailor::internal
