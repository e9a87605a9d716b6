// Config to TOML text, keys in the order config.hpp documents them.
#include <sstream>

#include "lib/config/config.hpp"
#include "lib/config/mac.hpp"
#include "lib/config/text.hpp"

namespace uroce::config {

namespace {

class TomlWriter {
 public:
  void line(std::string_view text) { out_ << text << '\n'; }
  void blank() { out_ << '\n'; }

  void string(std::string_view key, std::string_view value) { out_ << key << " = " << quote(value) << '\n'; }
  void optional_string(std::string_view key, const std::optional<std::string>& value) {
    if (value) string(key, *value);
  }
  template <class Int>
  void optional_integer(std::string_view key, const std::optional<Int>& value) {
    if (value) out_ << key << " = " << static_cast<int64_t>(*value) << '\n';
  }
  void boolean(std::string_view key, bool value) { out_ << key << " = " << (value ? "true" : "false") << '\n'; }

  // key = ["a", "b"]; left out when empty, as an empty list is the default.
  template <class T, class Format>
  void list(std::string_view key, const std::vector<T>& items, Format format) {
    if (items.empty()) return;
    out_ << key << " = [";
    for (size_t i = 0; i < items.size(); ++i) out_ << (i ? ", " : "") << quote(format(items[i]));
    out_ << "]\n";
  }

  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

void write_globals(TomlWriter& w, const Config& cfg) {
  w.string("progress", to_string(cfg.progress));
  w.string("log", to_string(cfg.log));
  w.optional_string("pcap", cfg.pcap);
}

void write_eal(TomlWriter& w, const EalConfig& eal) {
  w.blank();
  w.line("[eal]");
  w.optional_integer("core", eal.core);
  w.optional_integer("memory_mb", eal.memory_mb);
  w.list("extra", eal.extra, [](const std::string& s) { return s; });
  w.string("hugepages", to_string(eal.hugepages));
  w.boolean("telemetry", eal.telemetry);
}

// A parameter table: only what differs from the defaults (ConnectX's for DCQCN).
template <class C, size_t N>
void write_params(TomlWriter& w, std::string_view header, const std::array<ParamKey<C>, N>& keys, const C& v,
                  const C& defaults) {
  if (v == defaults) return;
  w.blank();
  w.line(header);
  for (const ParamKey<C>& k : keys) {
    if (k.flag != nullptr && v.*(k.flag) != defaults.*(k.flag)) w.boolean(k.name, v.*(k.flag));
    if (k.u32 != nullptr && v.*(k.u32) != defaults.*(k.u32)) w.optional_integer(k.name, std::optional<int64_t>(v.*(k.u32)));
  }
}

void write_device(TomlWriter& w, const DeviceConfig& dev) {
  w.blank();
  w.line("[[device]]");
  w.string("name", dev.name);
  w.string("kind", to_string(dev.kind));
  if (!dev.devargs.empty()) w.string("devargs", dev.devargs);
  w.list("addresses", dev.addresses, [](const IpPrefix& p) { return to_string(p); });
  if (dev.mac) w.string("mac", format_mac(*dev.mac));
  w.optional_integer("mtu", dev.mtu);
  w.optional_integer("vlan", dev.vlan);
  w.list("gids", dev.gids, [](const IpAddr& a) { return to_string(a); });
  w.optional_string("pcap", dev.pcap);
  w.optional_string("faults", dev.faults);
  if (dev.loss_recovery != LossRecovery::kGoBackN) w.string("loss_recovery", to_string(dev.loss_recovery));
  if (dev.spray_ports != 1) w.optional_integer("spray_ports", std::optional<int64_t>(dev.spray_ports));
  if (dev.engine_lcores != 1) w.optional_integer("engine_lcores", std::optional<int64_t>(dev.engine_lcores));
  const CcConfig defaults;
  if (dev.cc.ecn != defaults.ecn) w.boolean("ecn", dev.cc.ecn);
  if (dev.cc.mode != defaults.mode) w.string("cc", to_string(dev.cc.mode));
  if (dev.cc.repath != defaults.repath) w.boolean("repath", dev.cc.repath);
  if (dev.cc.repath_rounds != defaults.repath_rounds) {
    w.optional_integer("repath_rounds", std::optional<int64_t>(dev.cc.repath_rounds));
  }
  write_params(w, "[device.dcqcn]", kDcqcnKeys, dev.cc.dcqcn, defaults.dcqcn);
  write_params(w, "[device.delay]", kDelayKeys, dev.cc.delay, defaults.delay);
}

}  // namespace

std::string render_config(const Config& cfg) {
  TomlWriter w;
  write_globals(w, cfg);
  write_eal(w, cfg.eal);
  for (const DeviceConfig& dev : cfg.devices) write_device(w, dev);
  return w.str();
}

}  // namespace uroce::config
