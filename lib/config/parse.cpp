// TOML text to a Config: every key is looked up in its table's field list
// (an unknown key is an error), type-checked, and range- or syntax-checked
// on its own.  Tables are walked in file order so the first error reported
// is the first one in the file.
#include <toml++/toml.h>

#include <algorithm>
#include <utility>

#include "lib/config/fields.hpp"
#include "lib/config/internal.hpp"
#include "lib/config/mac.hpp"

namespace uroce::config {

namespace {

constexpr size_t kSuggestDistance = 2;  // edits between a typo and a known key

std::optional<SourcePos> pos_of(const toml::source_region& r) noexcept {
  if (!r.begin) return std::nullopt;
  return SourcePos{r.begin.line, r.begin.column};
}

// A node and the dotted path that names it.
struct At {
  const toml::node& node;
  std::string path;
  std::string_view source;
};

ConfigError fail(const At& at, std::string reason) {
  return error_at(at.source, pos_of(at.node.source()), at.path, std::move(reason));
}

std::string_view type_phrase(toml::node_type t) noexcept {
  switch (t) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
  }
  return "an unknown type";
}

ConfigError type_error(const At& at, std::string_view expected) {
  return fail(at, "expected " + std::string(expected) + ", got " + std::string(type_phrase(at.node.type())));
}

std::string child_path(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (!out.empty()) out += '.';
  return out + key_text(key);
}

std::string element_path(std::string_view parent, size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

// ---- typed reads of one node --------------------------------------------------

ConfigResult<std::string_view> read_string(const At& at, std::string_view expected = "a string") {
  const toml::value<std::string>* s = at.node.as_string();
  if (!s) return Err{type_error(at, expected)};
  return std::string_view(s->get());
}

ConfigResult<int64_t> read_integer_in(const At& at, int64_t lo, int64_t hi) {
  const toml::value<int64_t>* i = at.node.as_integer();
  if (!i) return Err{type_error(at, "an integer")};
  auto v = check_range(i->get(), lo, hi);
  if (!v) return Err{fail(at, v.error())};
  return *v;
}

ConfigResult<bool> read_bool(const At& at) {
  const toml::value<bool>* b = at.node.as_boolean();
  if (!b) return Err{type_error(at, "a boolean")};
  return b->get();
}

// A string that `parse` turns into a value or a reason.
template <class Parse>
auto read_text(const At& at, Parse parse) -> ConfigResult<typename decltype(parse(std::string_view{}))::value_type> {
  auto s = read_string(at);
  if (!s) return Err{std::move(s).error()};
  auto v = parse(*s);
  if (!v) return Err{fail(at, std::move(v).error())};
  return std::move(*v);
}

template <class E, size_t N>
ConfigResult<E> read_enum(const At& at, const std::array<EnumName<E>, N>& names) {
  auto s = read_string(at, "a string (" + enum_choices(names) + ")");
  if (!s) return Err{std::move(s).error()};
  auto v = parse_enum(names, *s);
  if (!v) return Err{fail(at, v.error())};
  return *v;
}

// An array whose elements `read_element(element, earlier)` reads.
template <class T, class ReadElement>
ConfigResult<std::vector<T>> read_list(const At& at, std::string_view expected, ReadElement read_element) {
  const toml::array* arr = at.node.as_array();
  if (!arr) return Err{type_error(at, expected)};
  std::vector<T> out;
  out.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    const At element{*arr->get(i), element_path(at.path, i), at.source};
    ConfigResult<T> v = read_element(element, out);
    if (!v) return Err{std::move(v).error()};
    out.push_back(std::move(*v));
  }
  return out;
}

// The list's own path without the trailing [i] of `element`.
std::string_view parent_path(const At& element) {
  return std::string_view(element.path).substr(0, element.path.rfind('['));
}

// `element` (a string already read) repeats the address of list[earlier].
ConfigError duplicate_address(const At& element, size_t earlier) {
  return fail(element, quote(element.node.as_string()->get()) + ": the address is already in " +
                           element_path(parent_path(element), earlier));
}

ConfigResult<IpPrefix> read_address(const At& at, const std::vector<IpPrefix>& earlier) {
  auto p = read_text(at, parse_ip_prefix);
  if (!p) return p;
  if (auto dup = find_address(earlier, p->addr)) {
    return Err{duplicate_address(at, *dup)};
  }
  return p;
}

ConfigResult<IpAddr> read_gid(const At& at, const std::vector<IpAddr>& earlier) {
  auto g = read_text(at, parse_gid);
  if (!g) return g;
  if (auto dup = find_address(earlier, *g)) {
    return Err{duplicate_address(at, *dup)};
  }
  return g;
}

ConfigResult<std::string> read_eal_arg(const At& at, const std::vector<std::string>& /*earlier*/) {
  return read_text(at, check_eal_arg);
}

// ---- tables of fields --------------------------------------------------------------

template <class Target>
struct Field {
  std::string_view name;
  Status (*read)(const At&, Target&);
};

template <class T, class Out>
Status assign(ConfigResult<T> r, Out& out) {
  if (!r) return Err{std::move(r).error()};
  out = std::move(*r);
  return Ok{};
}

template <class Narrow, class T, class Out>
Status assign_as(ConfigResult<T> r, Out& out) {
  if (!r) return Err{std::move(r).error()};
  out = static_cast<Narrow>(*r);
  return Ok{};
}

Status read_name(const At& at, DeviceConfig& d) { return assign(read_text(at, check_device_name), d.name); }
Status read_kind(const At& at, DeviceConfig& d) { return assign(read_enum(at, kDeviceKindNames), d.kind); }
Status read_devargs(const At& at, DeviceConfig& d) { return assign(read_text(at, check_devargs), d.devargs); }
Status read_addresses(const At& at, DeviceConfig& d) {
  return assign(read_list<IpPrefix>(at, "an array of \"address/prefix\" strings", read_address), d.addresses);
}
Status read_mac(const At& at, DeviceConfig& d) { return assign(read_text(at, parse_mac), d.mac); }
Status read_mtu(const At& at, DeviceConfig& d) {
  return assign_as<uint16_t>(read_integer_in(at, kMinMtu, kMaxMtu), d.mtu);
}
Status read_gids(const At& at, DeviceConfig& d) {
  return assign(read_list<IpAddr>(at, "an array of address strings", read_gid), d.gids);
}
Status read_device_pcap(const At& at, DeviceConfig& d) { return assign(read_text(at, check_path), d.pcap); }
Status read_faults(const At& at, DeviceConfig& d) { return assign(read_text(at, check_faults), d.faults); }
Status read_loss_recovery(const At& at, DeviceConfig& d) {
  return assign(read_enum(at, kLossRecoveryNames), d.loss_recovery);
}
Status read_spray_ports(const At& at, DeviceConfig& d) {
  return assign_as<uint32_t>(read_integer_in(at, 1, kMaxSprayPorts), d.spray_ports);
}
Status read_engine_lcores(const At& at, DeviceConfig& d) {
  return assign_as<uint32_t>(read_integer_in(at, 1, kMaxEngineLcores), d.engine_lcores);
}
Status read_ecn(const At& at, DeviceConfig& d) { return assign(read_bool(at), d.cc.ecn); }
Status read_cc_mode(const At& at, DeviceConfig& d) { return assign(read_enum(at, kCcModeNames), d.cc.mode); }
Status read_repath(const At& at, DeviceConfig& d) { return assign(read_bool(at), d.cc.repath); }
Status read_repath_rounds(const At& at, DeviceConfig& d) {
  return assign_as<uint32_t>(read_integer_in(at, 1, 1000), d.cc.repath_rounds);
}
Status read_dcqcn(const At& at, DeviceConfig& d);  // below: tables of their own keys
Status read_delay(const At& at, DeviceConfig& d);
Status read_vlan(const At& at, DeviceConfig& d) {
  return assign_as<uint16_t>(read_integer_in(at, 0, kMaxVlanId), d.vlan);
}

constexpr std::array kDeviceFields{
    Field<DeviceConfig>{"name", read_name},
    Field<DeviceConfig>{"kind", read_kind},
    Field<DeviceConfig>{"devargs", read_devargs},
    Field<DeviceConfig>{"addresses", read_addresses},
    Field<DeviceConfig>{"mac", read_mac},
    Field<DeviceConfig>{"mtu", read_mtu},
    Field<DeviceConfig>{"gids", read_gids},
    Field<DeviceConfig>{"pcap", read_device_pcap},
    Field<DeviceConfig>{"faults", read_faults},
    Field<DeviceConfig>{"vlan", read_vlan},
    Field<DeviceConfig>{"loss_recovery", read_loss_recovery},
    Field<DeviceConfig>{"spray_ports", read_spray_ports},
    Field<DeviceConfig>{"engine_lcores", read_engine_lcores},
    Field<DeviceConfig>{"ecn", read_ecn},
    Field<DeviceConfig>{"cc", read_cc_mode},
    Field<DeviceConfig>{"repath", read_repath},
    Field<DeviceConfig>{"repath_rounds", read_repath_rounds},
    Field<DeviceConfig>{"dcqcn", read_dcqcn},
    Field<DeviceConfig>{"delay", read_delay},
};

Status read_core(const At& at, EalConfig& e) { return assign_as<int>(read_integer_in(at, 0, kMaxLcore), e.core); }
Status read_memory(const At& at, EalConfig& e) {
  return assign_as<uint32_t>(read_integer_in(at, kMinMemoryMb, kMaxMemoryMb), e.memory_mb);
}
Status read_extra(const At& at, EalConfig& e) {
  return assign(read_list<std::string>(at, "an array of strings", read_eal_arg), e.extra);
}
Status read_hugepages(const At& at, EalConfig& e) { return assign(read_enum(at, kHugepagesNames), e.hugepages); }
Status read_telemetry(const At& at, EalConfig& e) { return assign(read_bool(at), e.telemetry); }

constexpr std::array kEalFields{
    Field<EalConfig>{"core", read_core},
    Field<EalConfig>{"memory_mb", read_memory},
    Field<EalConfig>{"extra", read_extra},
    Field<EalConfig>{"hugepages", read_hugepages},
    Field<EalConfig>{"telemetry", read_telemetry},
};

// ---- walking a table -------------------------------------------------------------------

using Entry = std::pair<const toml::key*, const toml::node*>;

// toml++ keeps a table's keys sorted by name; errors should follow the file.
std::vector<Entry> in_file_order(const toml::table& tbl) {
  std::vector<Entry> entries;
  for (const auto& [key, node] : tbl) entries.emplace_back(&key, &node);
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const toml::source_position& pa = a.first->source().begin;
    const toml::source_position& pb = b.first->source().begin;
    return std::pair(pa.line, pa.column) < std::pair(pb.line, pb.column);
  });
  return entries;
}

template <class Target, size_t N>
ConfigError unknown_key(const std::array<Field<Target>, N>& fields, const toml::key& key, const At& at) {
  std::array<std::string_view, N> names{};
  std::transform(fields.begin(), fields.end(), names.begin(), [](const Field<Target>& f) { return f.name; });
  std::string reason = "unknown key";
  if (std::string_view near = closest(key.str(), names, kSuggestDistance); !near.empty()) {
    reason += "; did you mean " + quote(near) + "?";
  } else {
    reason += " (known keys:";
    for (std::string_view n : names) reason += " " + std::string(n);
    reason += ")";
  }
  return error_at(at.source, pos_of(key.source()), at.path, std::move(reason));
}

template <class Target, size_t N>
Status read_fields(const At& at, const std::array<Field<Target>, N>& fields, Target& target) {
  const toml::table* tbl = at.node.as_table();
  if (!tbl) return Err{type_error(at, "a table")};
  for (const auto& [key, node] : in_file_order(*tbl)) {
    const At child{*node, child_path(at.path, key->str()), at.source};
    const std::string_view name = key->str();  // (clang 14 cannot capture a structured binding)
    const auto field =
        std::find_if(fields.begin(), fields.end(), [name](const Field<Target>& f) { return f.name == name; });
    if (field == fields.end()) return Err{unknown_key(fields, *key, child)};
    if (Status s = field->read(child, target); !s) return s;
  }
  return Ok{};
}

// A parameter table ([device.dcqcn], [device.delay]): every key of its
// cc.hpp table, each in its range.
template <class C, size_t N>
Status read_params(const At& at, const std::array<ParamKey<C>, N>& keys, C& out) {
  const toml::table* tbl = at.node.as_table();
  if (!tbl) return Err{type_error(at, "a table")};
  for (const auto& [key, node] : in_file_order(*tbl)) {
    const At child{*node, child_path(at.path, key->str()), at.source};
    const std::string_view name = key->str();
    const auto k = std::find_if(keys.begin(), keys.end(), [name](const ParamKey<C>& e) { return e.name == name; });
    if (k == keys.end()) {
      std::array<std::string_view, N> names{};
      std::transform(keys.begin(), keys.end(), names.begin(), [](const ParamKey<C>& e) { return e.name; });
      std::string reason = "unknown key";
      if (std::string_view near = closest(name, names, kSuggestDistance); !near.empty()) {
        reason += "; did you mean " + quote(near) + "?";
      }
      return Err{error_at(at.source, pos_of(key->source()), child.path, std::move(reason))};
    }
    if (k->flag != nullptr) {
      if (Status s = assign(read_bool(child), out.*(k->flag)); !s) return s;
    } else {
      if (Status s = assign_as<uint32_t>(read_integer_in(child, k->lo, k->hi), out.*(k->u32)); !s) return s;
    }
  }
  return Ok{};
}

Status read_dcqcn(const At& at, DeviceConfig& d) { return read_params(at, kDcqcnKeys, d.cc.dcqcn); }
Status read_delay(const At& at, DeviceConfig& d) { return read_params(at, kDelayKeys, d.cc.delay); }

// ---- the top level -----------------------------------------------------------------------

std::optional<SourcePos> key_pos(const toml::table& tbl, std::string_view key) {
  const toml::node* n = tbl.get(key);
  return n ? pos_of(n->source()) : std::nullopt;
}

Status read_devices(const At& at, Parsed& p) {
  const toml::array* arr = at.node.as_array();
  if (!arr) return Err{type_error(at, "an array of tables ([[device]])")};
  for (size_t i = 0; i < arr->size(); ++i) {
    const At element{*arr->get(i), element_path(at.path, i), at.source};
    DeviceConfig dev;
    if (Status s = read_fields(element, kDeviceFields, dev); !s) return s;
    const toml::table& tbl = *element.node.as_table();
    p.cfg.devices.push_back(std::move(dev));
    p.origins.push_back(
        {pos_of(tbl.source()), key_pos(tbl, "name"), key_pos(tbl, "devargs"), key_pos(tbl, "spray_ports"),
         key_pos(tbl, "engine_lcores")});
  }
  return Ok{};
}

Status read_progress(const At& at, Parsed& p) { return assign(read_enum(at, kProgressNames), p.cfg.progress); }
Status read_log(const At& at, Parsed& p) { return assign(read_enum(at, kLogLevelNames), p.cfg.log); }
Status read_global_pcap(const At& at, Parsed& p) { return assign(read_text(at, check_path), p.cfg.pcap); }
Status read_eal(const At& at, Parsed& p) { return read_fields(at, kEalFields, p.cfg.eal); }

constexpr std::array kTopFields{
    Field<Parsed>{"device", read_devices},
    Field<Parsed>{"progress", read_progress},
    Field<Parsed>{"log", read_log},
    Field<Parsed>{"pcap", read_global_pcap},
    Field<Parsed>{"eal", read_eal},
};

ConfigError syntax_error(std::string_view source, const toml::parse_error& e) {
  return error_at(source, pos_of(e.source()), "", std::string(e.description()));
}

}  // namespace

ConfigResult<Parsed> parse_toml(std::string_view text, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Err{syntax_error(source, e)};
  }
  Parsed p;
  p.source = std::string(source);
  if (Status s = read_fields(At{root, "", source}, kTopFields, p); !s) return Err{std::move(s).error()};
  return p;
}

}  // namespace uroce::config
