// The device nodes the drop-in and uroced make for UCX (drivers/devnode.hpp),
// in a directory of the test's own: made once with /dev/null's number and
// mode 0666, left alone when present, never a real device's removed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "drivers/devnode.hpp"

namespace uroce::drivers {
namespace {

class DevNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!may_make_dev_nodes()) GTEST_SKIP() << "needs CAP_MKNOD (root)";
    char tmpl[] = "/tmp/uroce-devnode-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    dir_ = base_ + "/infiniband";
  }
  void TearDown() override {
    if (base_.empty()) return;
    std::string cmd = "rm -rf '" + base_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  static struct stat stat_of(const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st;
  }
  std::string base_, dir_;
};

TEST_F(DevNodes, MadeOnceWithNullsNumberAndOpenToAll) {
  struct stat null_st {};
  ASSERT_EQ(::stat("/dev/null", &null_st), 0);
  const mode_t old_mask = ::umask(077);  // the mode is what we set, not the umask's
  const DevNodeReport r = make_dev_nodes(dir_, 2);
  ::umask(old_mask);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  ASSERT_EQ(r.made.size(), 2u);
  EXPECT_EQ(r.made[0], dir_ + "/uroce-uverbs0");
  EXPECT_EQ(r.made[1], dir_ + "/uroce-uverbs1");
  for (const std::string& p : r.made) {
    const struct stat st = stat_of(p);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(st.st_rdev, null_st.st_rdev);
    EXPECT_EQ(st.st_mode & 0777, 0666u);
  }
  // A second call (another process, uroced) finds them and makes nothing.
  const DevNodeReport again = make_dev_nodes(dir_, 3);
  EXPECT_TRUE(again.errors.empty());
  ASSERT_EQ(again.made.size(), 1u);
  EXPECT_EQ(again.made[0], dir_ + "/uroce-uverbs2");
  EXPECT_TRUE(remove_dev_nodes(dir_, 3).errors.empty());
  struct stat gone {};
  EXPECT_NE(::lstat(dir_.c_str(), &gone), 0) << "the emptied directory stays";
}

TEST_F(DevNodes, SomethingElseUnderTheNameIsReportedAndKept) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
  const std::string file = dir_ + "/uroce-uverbs0";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  // A character device of another number (a real uverbs node would be one).
  const std::string other = dir_ + "/uroce-uverbs1";
  ASSERT_EQ(::mknod(other.c_str(), S_IFCHR | 0600, ::makedev(1, 5)), 0);  // /dev/zero's
  const DevNodeReport r = make_dev_nodes(dir_, 2);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("not a character device"), std::string::npos) << r.errors[0];
  EXPECT_TRUE(r.made.empty());
  EXPECT_TRUE(remove_dev_nodes(dir_, 2).errors.empty());
  EXPECT_TRUE(S_ISREG(stat_of(file).st_mode)) << "not ours: kept";
  EXPECT_TRUE(S_ISCHR(stat_of(other).st_mode)) << "not /dev/null's number: kept";
}

}  // namespace
}  // namespace uroce::drivers
