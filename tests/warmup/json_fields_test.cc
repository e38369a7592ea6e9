// Reading documents: only regular files of sane size are read (a FIFO or
// device is refused without blocking), and nesting past kMaxJsonDepth is
// refused before the parser (and every reader that recurses) sees it.
#include "warmup/json_fields.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "test_util.h"
#include "warmup/history.h"
#include "warmup/profile.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TempDir;
using ::testing::HasSubstr;

TEST(JsonDocumentTest, ReadsARegularFile) {
  TempDir dir;
  std::ofstream(dir.path() + "/p.json") << "{\"a\": 1}";
  absl::StatusOr<std::string> text =
      ReadJsonDocumentFile(dir.path() + "/p.json", "profile");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
  EXPECT_THAT(ReadJsonDocumentFile(dir.path() + "/none.json", "profile"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot read " + dir.path() +
                                 "/none.json: No such file or directory")));
}

TEST(JsonDocumentTest, RefusesWhatIsNotARegularFileWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, kind] :
       {std::pair{fifo, "a FIFO"}, {std::string("/dev/zero"),
                                    "a character device"},
        {dir.path(), "a directory"}}) {
    auto read = std::async(std::launch::async, [path = path] {
      return ReadJsonDocumentFile(path, "history");
    });
    ASSERT_EQ(read.wait_for(std::chrono::seconds(10)),
              std::future_status::ready)
        << path;  // (a hung FIFO read leaks the thread; the test fails)
    EXPECT_THAT(read.get(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "history " + path + ": is " + kind +
                             ", not a regular file"));
  }
}

TEST(JsonDocumentTest, RefusesMoreThanADocumentCanBe) {
  TempDir dir;
  const std::string path = dir.path() + "/big.json";
  std::ofstream(path) << std::string(kMaxJsonDocumentBytes + 1, ' ');
  EXPECT_THAT(ReadJsonDocumentFile(path, "profile"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "profile " + path +
                           ": is more than 16777216 bytes (a profile is far "
                           "smaller)"));
  std::filesystem::resize_file(path, kMaxJsonDocumentBytes);
  EXPECT_TRUE(ReadJsonDocumentFile(path, "profile").ok());
}

TEST(JsonDocumentTest, DepthLimit) {
  auto nested = [](int depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  EXPECT_TRUE(ParseJsonDocument(nested(kMaxJsonDepth), "profile").ok());
  EXPECT_THAT(ParseJsonDocument(nested(kMaxJsonDepth + 1), "profile"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "profile: nested deeper than 32 levels (at byte 32)"));
  // 100,000 deep used to overflow the stack (SIGSEGV) in the readers.
  EXPECT_THAT(ParseProfile(nested(100000)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("profile: nested deeper than 32 levels")));
  EXPECT_THAT(ParseHistory("{\"a\": " + nested(100000) + "}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: nested deeper than 32 levels (at byte 37)"));
  // Brackets inside strings (escaped quotes too) are not nesting.
  const std::string in_string =
      "[\"" + std::string(100, '[') + "\\\"" + std::string(100, '{') + "\"]";
  EXPECT_TRUE(ParseJsonDocument(in_string, "profile").ok());
}

}  // namespace
}  // namespace tailor::internal
