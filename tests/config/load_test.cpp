// load_config: where the file comes from (UROCE_CONFIG, else the default
// path, which may be missing), and the shipped example.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lib/config/config.hpp"

#ifndef UROCE_EXAMPLE_CONFIG
#error "the build passes the path of scripts/uroce.example.toml"
#endif

namespace uroce::config {
namespace {

namespace fs = std::filesystem;
using EnvMap = std::map<std::string, std::string, std::less<>>;

class LoadConfig : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(testing::TempDir()) / "uroce-config-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, std::string_view text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::string missing() const { return (dir_ / "missing.toml").string(); }

  fs::path dir_;
};

TEST_F(LoadConfig, ReadsTheFileUroceConfigNames) {
  const std::string path = write("a.toml", "log = \"info\"\n[[device]]\ndevargs = \"net_ring0\"\n");
  auto r = load_config(env_from_map({{"UROCE_CONFIG", path}}), missing());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->log, LogLevel::kInfo);
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_EQ(r->devices[0].devargs, "net_ring0");
}

TEST_F(LoadConfig, ErrorsNameTheFile) {
  const std::string path = write("bad.toml", "[[device]]\ndevargs = \"net_ring0\"\nmtu = 12000\n");
  auto r = load_config(env_from_map({{"UROCE_CONFIG", path}}), missing());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), path + ":3:7: device[0].mtu: 12000 is out of range 256..9000");
}

TEST_F(LoadConfig, ReadsTheDefaultFileWithoutUroceConfig) {
  const std::string path = write("default.toml", "progress = \"inline\"\n");
  auto r = load_config(env_from_map({}), path);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->progress, Progress::kInline);
}

TEST_F(LoadConfig, EmptyUroceConfigMeansTheDefaultFile) {
  const std::string path = write("default.toml", "progress = \"inline\"\n");
  auto r = load_config(env_from_map({{"UROCE_CONFIG", ""}}), path);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->progress, Progress::kInline);
}

TEST_F(LoadConfig, MissingDefaultFileLeavesTheEnvironment) {
  auto r = load_config(env_from_map({{"UROCE_DEVICE", "net_af_packet0,iface=veth0"}, {"UROCE_IP", "10.0.0.1/24"}}),
                       missing());
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_EQ(r->devices[0].name, "uroce0");
  EXPECT_EQ(r->devices[0].devargs, "net_af_packet0,iface=veth0");
  ASSERT_EQ(r->devices[0].addresses.size(), 1u);
  EXPECT_EQ(to_string(r->devices[0].addresses[0]), "10.0.0.1/24");
}

TEST_F(LoadConfig, MissingDefaultFileAndNoEnvironmentIsAnEmptyConfig) {
  auto r = load_config(env_from_map({}), missing());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, Config{});
}

TEST_F(LoadConfig, EnvironmentErrorsWithoutAFileHaveNoFileName) {
  auto r = load_config(env_from_map({{"UROCE_LOG", "loud"}}), missing());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "UROCE_LOG: \"loud\" is not \"error\", \"warning\", \"info\" or \"debug\"");
}

TEST_F(LoadConfig, UnreadableDefaultFileIsAnError) {
  auto r = load_config(env_from_map({}), dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), dir_.string() + ": cannot read: Is a directory");
}

TEST(ProcessEnv, ReadsTheRealEnvironment) {
  // Read-only: PATH is set under meson test and in any shell.
  const EnvLookup env = process_env();
  const std::optional<std::string> path = env("PATH");
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, std::string(::getenv("PATH")));
  EXPECT_FALSE(env("UROCE_TEST_SURELY_UNSET_VARIABLE_1234").has_value());
}

// The example the project ships must load, and say what it shows.
TEST(ExampleConfig, Loads) {
  auto r = load_config(env_from_map({{"UROCE_CONFIG", UROCE_EXAMPLE_CONFIG}}), "/nonexistent");
  ASSERT_TRUE(r.ok()) << r.error().message();
  const Config& c = *r;
  EXPECT_EQ(c.progress, Progress::kThread);
  EXPECT_EQ(c.log, LogLevel::kWarning);
  ASSERT_EQ(c.devices.size(), 2u);
  EXPECT_EQ(c.devices[0].name, "uroce0");
  EXPECT_EQ(c.devices[0].devargs, "net_af_packet0,iface=veth0");
  ASSERT_EQ(c.devices[0].addresses.size(), 2u);
  EXPECT_EQ(to_string(c.devices[0].addresses[0]), "10.0.0.1/24");
  EXPECT_EQ(c.devices[1].kind, DeviceKind::kDpdk);
  EXPECT_EQ(c.devices[1].devargs.rfind("net_memif0,", 0), 0u);

  auto again = parse_config(render_config(c), "rendered", env_from_map({}));
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(*again, c);
}

}  // namespace
}  // namespace uroce::config
