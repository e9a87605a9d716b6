#include "tools/uroce/telemetry_client.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace uroce::tools {
namespace {

namespace fs = std::filesystem;

// Far above DPDK's own reply limit (max_output_len, 16 KiB in 22.11).
constexpr size_t kMaxMessage = 1 << 16;
constexpr time_t kReplyTimeoutS = 2;

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

std::string dpdk_runtime_base() {
  if (geteuid() == 0) return "/var/run/dpdk";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR")) return (fs::path(xdg) / "dpdk").native();
  return "/tmp/dpdk";
}

std::vector<TelemetryTarget> find_uroce_processes(const std::string& base) {
  std::vector<TelemetryTarget> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().native();
    if (!name.starts_with(kUroceRuntimePrefix)) continue;
    int pid = 0;
    const char* first = name.data() + kUroceRuntimePrefix.size();
    const char* last = name.data() + name.size();
    const auto [end, err] = std::from_chars(first, last, pid);
    if (err != std::errc() || end != last || pid <= 0) continue;
    const fs::path sock = e.path() / kTelemetrySocketName;
    if (fs::exists(sock, ec)) out.push_back({pid, sock.native()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

Result<TelemetryClient, std::string> TelemetryClient::connect(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return Err{path + ": path too long for a Unix socket"};
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{errno_text("socket")};
  TelemetryClient c(fd);
  const timeval timeout{kReplyTimeoutS, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Err{errno_text("connect " + path)};
  }
  auto greeting = c.receive();
  if (!greeting) return Err{greeting.error()};
  const auto doc = nlohmann::ordered_json::parse(*greeting, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Err{path + ": the greeting is not JSON"};
  c.max_output_ = doc.value("max_output_len", size_t{0});
  return Result<TelemetryClient, std::string>(std::move(c));
}

TelemetryClient::~TelemetryClient() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string, std::string> TelemetryClient::receive() {
  std::string buf(std::max(kMaxMessage, max_output_ + 1), '\0');
  const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
  if (n < 0) return Err{errno_text("recv")};
  if (n == 0) return Err{std::string("the process closed the telemetry connection")};
  buf.resize(static_cast<size_t>(n));
  return buf;
}

Result<nlohmann::ordered_json, std::string> TelemetryClient::query(const std::string& command) {
  if (::send(fd_, command.data(), command.size(), 0) < 0) return Err{errno_text("send")};
  auto reply = receive();
  if (!reply) return Err{reply.error()};
  auto doc = nlohmann::ordered_json::parse(*reply, nullptr, false);
  const std::string key = command.substr(0, command.find(','));
  if (doc.is_discarded() || !doc.is_object() || !doc.contains(key)) {
    return Err{command + ": the reply is not the command's JSON"};
  }
  if (doc[key].is_null()) return Err{command + ": the process refused the command (no such device?)"};
  return nlohmann::ordered_json(std::move(doc[key]));
}

Result<nlohmann::json, std::string> process_qps(const TelemetryTarget& t) {
  auto client = TelemetryClient::connect(t.socket);
  if (!client) return Err{client.error()};
  auto names = client->query("/uroce/devices");
  if (!names) return Err{names.error()};
  std::string program;
  if (std::FILE* f = std::fopen(("/proc/" + std::to_string(t.pid) + "/comm").c_str(), "r")) {
    char buf[64] = "";
    if (std::fgets(buf, sizeof buf, f) != nullptr) program = buf;
    std::fclose(f);
    if (!program.empty() && program.back() == '\n') program.pop_back();
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& n : *names) {
    if (!n.is_string()) continue;
    const std::string dev = n.get<std::string>();
    nlohmann::json qps = nlohmann::json::array();
    for (uint64_t first = 0;;) {  // a page at a time: "next" is where the next one starts, 0 after the last
      auto page = client->query("/uroce/qps," + dev + "," + std::to_string(first));
      if (!page) return Err{page.error()};
      for (const auto& [key, row] : page->items())  // "row<n>" in order, then "next"
        if (key.rfind("row", 0) == 0) qps.push_back(nlohmann::json::parse(row.dump()));  // ordered -> plain
      const uint64_t next = page->value("next", uint64_t{0});
      if (next <= first) break;
      first = next;
    }
    out.push_back({{"pid", t.pid}, {"program", program}, {"device", dev}, {"in_process", true}, {"qps", qps}});
  }
  return out;
}

std::vector<TelemetryTarget> telemetry_targets(int pid, const std::string& base) {
  if (pid == 0) return find_uroce_processes(base);
  return {TelemetryTarget{pid, base + "/" + std::string(kUroceRuntimePrefix) + std::to_string(pid) + "/" +
                                   std::string(kTelemetrySocketName)}};
}

}  // namespace uroce::tools
