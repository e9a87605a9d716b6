// Every way a configuration can be wrong, each with the exact message the
// user sees: where (file:line:column), which key (a dotted path or the
// environment variable) and why.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "lib/config/config.hpp"

namespace uroce::config {
namespace {

using EnvMap = std::map<std::string, std::string, std::less<>>;

// How a case is loaded: from TOML text named "t.toml", or by load_config
// (where the file comes from UROCE_CONFIG).
enum class From { kText, kLoad };

struct BadCase {
  const char* name;
  const char* toml;
  EnvMap env;
  std::string expected;  // the whole message
  From from = From::kText;
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

// Lines 1 and 2 of most device cases; the key under test is on line 3.
#define DEVICE_HEAD "[[device]]\ndevargs = \"net_ring0\"\n"
// A default path that never exists, so kLoad cases read only UROCE_CONFIG.
constexpr std::string_view kNoDefaultFile = "/nonexistent/uroce-default.toml";

const BadCase kBadCases[] = {
    // ---- TOML syntax: toml++'s description at its position --------------------------
    {"SyntaxUnterminatedString", "log = \"info\n", {},
     "t.toml:1:12: Error while parsing string: unescaped control characters other than TAB (U+0009) are "
     "explicitly prohibited"},
    {"SyntaxMissingValue", "progress = \n", {},
     "t.toml:1:12: Error while parsing key-value pair: expected value, saw '\\n'"},
    {"SyntaxDuplicateKey", "log = \"info\"\nlog = \"debug\"\n", {},
     "t.toml:2:7: Error while parsing key-value pair: cannot redefine existing string 'log'"},

    // ---- unknown keys ---------------------------------------------------------------------
    {"UnknownTopKeySuggested", "devcie = 1\n", {}, "t.toml:1:1: devcie: unknown key; did you mean \"device\"?"},
    {"UnknownTopKeyListed", "colour = \"red\"\n", {},
     "t.toml:1:1: colour: unknown key (known keys: device progress log pcap eal)"},
    {"UnknownDeviceKeySuggested", DEVICE_HEAD "adresses = [\"10.0.0.1/24\"]\n", {},
     "t.toml:3:1: device[0].adresses: unknown key; did you mean \"addresses\"?"},
    {"UnknownDeviceKeyListed", DEVICE_HEAD "speed = 100\n", {},
     "t.toml:3:1: device[0].speed: unknown key (known keys: name kind devargs addresses mac mtu gids pcap "
     "faults vlan loss_recovery spray_ports engine_lcores ecn cc repath repath_rounds dcqcn delay)"},
    {"UnknownEalKeySuggested", "[eal]\ncores = 2\n", {}, "t.toml:2:1: eal.cores: unknown key; did you mean \"core\"?"},
    {"UnknownQuotedKey", "[eal]\n\"memory mb\" = 2\n", {},
     "t.toml:2:1: eal.\"memory mb\": unknown key; did you mean \"memory_mb\"?"},

    // ---- types: every key names the type it wants -------------------------------------------
    {"DeviceIsATable", "[device]\ndevargs = \"net_ring0\"\n", {},
     "t.toml:1:1: device: expected an array of tables ([[device]]), got a table"},
    {"DeviceElementNotATable", "device = [1]\n", {}, "t.toml:1:11: device[0]: expected a table, got an integer"},
    {"ProgressType", "progress = 1\n", {},
     "t.toml:1:12: progress: expected a string (\"thread\" or \"inline\"), got an integer"},
    {"LogType", "log = true\n", {},
     "t.toml:1:7: log: expected a string (\"error\", \"warning\", \"info\" or \"debug\"), got a boolean"},
    {"PcapType", "pcap = 5\n", {}, "t.toml:1:8: pcap: expected a string, got an integer"},
    {"EalType", "eal = \"x\"\n", {}, "t.toml:1:7: eal: expected a table, got a string"},
    {"EalCoreType", "[eal]\ncore = \"1\"\n", {}, "t.toml:2:8: eal.core: expected an integer, got a string"},
    {"EalMemoryType", "[eal]\nmemory_mb = 1.5\n", {},
     "t.toml:2:13: eal.memory_mb: expected an integer, got a floating-point number"},
    {"EalExtraType", "[eal]\nextra = \"--foo\"\n", {},
     "t.toml:2:9: eal.extra: expected an array of strings, got a string"},
    {"EalExtraElementType", "[eal]\nextra = [\"-a\", 3]\n", {},
     "t.toml:2:16: eal.extra[1]: expected a string, got an integer"},
    {"EalHugepagesType", "[eal]\nhugepages = true\n", {},
     "t.toml:2:13: eal.hugepages: expected a string (\"auto\", \"yes\" or \"no\"), got a boolean"},
    {"EalTelemetryType", "[eal]\ntelemetry = \"yes\"\n", {},
     "t.toml:2:13: eal.telemetry: expected a boolean, got a string"},
    {"NameType", DEVICE_HEAD "name = 1\n", {}, "t.toml:3:8: device[0].name: expected a string, got an integer"},
    {"KindType", DEVICE_HEAD "kind = 1\n", {},
     "t.toml:3:8: device[0].kind: expected a string (\"dpdk\" or \"sim\"), got an integer"},
    {"DevargsType", "[[device]]\ndevargs = [\"net_ring0\"]\n", {},
     "t.toml:2:11: device[0].devargs: expected a string, got an array"},
    {"AddressesType", DEVICE_HEAD "addresses = \"10.0.0.1/24\"\n", {},
     "t.toml:3:13: device[0].addresses: expected an array of \"address/prefix\" strings, got a string"},
    {"AddressElementType", DEVICE_HEAD "addresses = [1]\n", {},
     "t.toml:3:14: device[0].addresses[0]: expected a string, got an integer"},
    {"MacType", DEVICE_HEAD "mac = 0x020000000001\n", {}, "t.toml:3:7: device[0].mac: expected a string, got an integer"},
    {"MtuType", DEVICE_HEAD "mtu = \"1500\"\n", {}, "t.toml:3:7: device[0].mtu: expected an integer, got a string"},
    {"GidsType", DEVICE_HEAD "gids = \"fe80::1\"\n", {},
     "t.toml:3:8: device[0].gids: expected an array of address strings, got a string"},
    {"DevicePcapType", DEVICE_HEAD "pcap = false\n", {}, "t.toml:3:8: device[0].pcap: expected a string, got a boolean"},
    {"FaultsType", DEVICE_HEAD "faults = 1\n", {}, "t.toml:3:10: device[0].faults: expected a string, got an integer"},
    {"VlanType", DEVICE_HEAD "vlan = 1.0\n", {},
     "t.toml:3:8: device[0].vlan: expected an integer, got a floating-point number"},
    {"DateType", DEVICE_HEAD "mtu = 1979-05-27\n", {}, "t.toml:3:7: device[0].mtu: expected an integer, got a date"},

    // ---- ranges ---------------------------------------------------------------------------
    {"MtuTooBig", DEVICE_HEAD "mtu = 12000\n", {}, "t.toml:3:7: device[0].mtu: 12000 is out of range 256..9000"},
    {"MtuTooSmall", DEVICE_HEAD "mtu = 255\n", {}, "t.toml:3:7: device[0].mtu: 255 is out of range 256..9000"},
    {"MtuOnSecondDevice", DEVICE_HEAD "[[device]]\ndevargs = \"net_ring1\"\n    mtu = 12000\n", {},
     "t.toml:5:11: device[1].mtu: 12000 is out of range 256..9000"},
    {"VlanReserved", DEVICE_HEAD "vlan = 4095\n", {}, "t.toml:3:8: device[0].vlan: 4095 is out of range 0..4094"},
    {"VlanNegative", DEVICE_HEAD "vlan = -1\n", {}, "t.toml:3:8: device[0].vlan: -1 is out of range 0..4094"},
    {"CoreNegative", "[eal]\ncore = -1\n", {}, "t.toml:2:8: eal.core: -1 is out of range 0..1023"},
    {"CoreTooBig", "[eal]\ncore = 1024\n", {}, "t.toml:2:8: eal.core: 1024 is out of range 0..1023"},
    {"MemoryZero", "[eal]\nmemory_mb = 0\n", {}, "t.toml:2:13: eal.memory_mb: 0 is out of range 16..1048576"},
    {"MemoryHuge", "[eal]\nmemory_mb = 9223372036854775807\n", {},
     "t.toml:2:13: eal.memory_mb: 9223372036854775807 is out of range 16..1048576"},

    // ---- addresses ------------------------------------------------------------------------
    {"Ipv4PrefixTooLong", DEVICE_HEAD "addresses = [\"10.0.0.1/33\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"10.0.0.1/33\": prefix length 33 is out of range 0..32"},
    {"Ipv4OctetTooBig", DEVICE_HEAD "addresses = [\"300.1.1.1/24\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"300.1.1.1/24\": octet 300 is out of range 0..255"},
    {"Ipv4ThreeOctets", DEVICE_HEAD "addresses = [\"1.2.3/24\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"1.2.3/24\": an IPv4 address has 4 octets, this has 3"},
    {"Ipv4LeadingZero", DEVICE_HEAD "addresses = [\"10.0.0.01/24\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"10.0.0.01/24\": octet \"01\" has a leading zero (octal is not "
     "accepted)"},
    {"Ipv4EmptyOctet", DEVICE_HEAD "addresses = [\"10..0.1/24\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"10..0.1/24\": empty octet"},
    {"Ipv6PrefixTooLong", DEVICE_HEAD "addresses = [\"::1/129\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"::1/129\": prefix length 129 is out of range 0..128"},
    {"Ipv6Invalid", DEVICE_HEAD "addresses = [\"fd00::zz/64\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"fd00::zz/64\": not a valid IPv6 address"},
    {"MissingPrefix", DEVICE_HEAD "addresses = [\"10.0.0.1\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"10.0.0.1\": the prefix length is missing (address/prefix, e.g. "
     "\"10.0.0.1/24\")"},
    {"PrefixNotANumber", DEVICE_HEAD "addresses = [\"10.0.0.1/abc\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"10.0.0.1/abc\": prefix length \"abc\" is not a decimal number"},
    {"MissingAddress", DEVICE_HEAD "addresses = [\"/24\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"/24\": the address before '/' is missing"},
    {"LoopbackAddress", DEVICE_HEAD "addresses = [\"10.0.0.1/24\", \"127.0.0.1/8\"]\n", {},
     "t.toml:3:29: device[0].addresses[1]: \"127.0.0.1/8\": a loopback address cannot be a device address"},
    {"MulticastAddress", DEVICE_HEAD "addresses = [\"ff02::1/64\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"ff02::1/64\": a multicast address cannot be a device address"},
    {"UnspecifiedAddress", DEVICE_HEAD "addresses = [\"0.0.0.0/0\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"0.0.0.0/0\": an unspecified address cannot be a device address"},
    {"MappedAddress", DEVICE_HEAD "addresses = [\"::ffff:10.0.0.1/120\"]\n", {},
     "t.toml:3:14: device[0].addresses[0]: \"::ffff:10.0.0.1/120\": an IPv4-mapped IPv6 address; write the IPv4 "
     "address and its prefix"},
    {"DuplicateAddress", DEVICE_HEAD "addresses = [\"10.0.0.1/24\", \"10.0.0.1/16\"]\n", {},
     "t.toml:3:29: device[0].addresses[1]: \"10.0.0.1/16\": the address is already in device[0].addresses[0]"},

    // ---- GIDs -----------------------------------------------------------------------------
    {"GidWithPrefix", DEVICE_HEAD "gids = [\"10.0.0.1/24\"]\n", {},
     "t.toml:3:9: device[0].gids[0]: \"10.0.0.1/24\": a GID is an address without a prefix length"},
    {"GidMulticast", DEVICE_HEAD "gids = [\"ff02::1\"]\n", {},
     "t.toml:3:9: device[0].gids[0]: \"ff02::1\": a multicast address cannot be a GID"},
    {"GidInvalid", DEVICE_HEAD "gids = [\"fe80::1::2\"]\n", {},
     "t.toml:3:9: device[0].gids[0]: \"fe80::1::2\": not a valid IPv6 address"},
    {"GidDuplicateAcrossFamilies", DEVICE_HEAD "gids = [\"10.0.0.1\", \"::ffff:10.0.0.1\"]\n", {},
     "t.toml:3:21: device[0].gids[1]: \"::ffff:10.0.0.1\": the address is already in device[0].gids[0]"},

    // ---- MAC ------------------------------------------------------------------------------
    {"MacShort", DEVICE_HEAD "mac = \"aa:bb:cc:dd:ee\"\n", {},
     "t.toml:3:7: device[0].mac: \"aa:bb:cc:dd:ee\": not a MAC address (six hex pairs like "
     "\"02:00:00:00:00:01\")"},
    {"MacNotHex", DEVICE_HEAD "mac = \"02:00:00:00:00:0g\"\n", {},
     "t.toml:3:7: device[0].mac: \"02:00:00:00:00:0g\": not a MAC address (six hex pairs like "
     "\"02:00:00:00:00:01\")"},
    {"MacDashes", DEVICE_HEAD "mac = \"02-00-00-00-00-01\"\n", {},
     "t.toml:3:7: device[0].mac: \"02-00-00-00-00-01\": not a MAC address (six hex pairs like "
     "\"02:00:00:00:00:01\")"},
    {"MacMulticast", DEVICE_HEAD "mac = \"01:00:5e:00:00:01\"\n", {},
     "t.toml:3:7: device[0].mac: \"01:00:5e:00:00:01\": a multicast MAC cannot be a device's address"},
    {"MacZero", DEVICE_HEAD "mac = \"00:00:00:00:00:00\"\n", {},
     "t.toml:3:7: device[0].mac: \"00:00:00:00:00:00\": the all-zero MAC cannot be a device's address"},

    // ---- names ----------------------------------------------------------------------------
    {"DuplicateName", DEVICE_HEAD "name = \"a\"\n[[device]]\ndevargs = \"net_ring1\"\nname = \"a\"\n", {},
     "t.toml:6:8: device[1].name: \"a\" is already the name of device[0]"},
    {"NameWithSpace", DEVICE_HEAD "name = \"uroce 0\"\n", {},
     "t.toml:3:8: device[0].name: \"uroce 0\": a device name is letters, digits, '_' and '-'"},
    {"NameWithDot", DEVICE_HEAD "name = \"uroce.0\"\n", {},
     "t.toml:3:8: device[0].name: \"uroce.0\": a device name is letters, digits, '_' and '-'"},
    {"NameEmpty", DEVICE_HEAD "name = \"\"\n", {},
     "t.toml:3:8: device[0].name: \"\": a device name is letters, digits, '_' and '-'"},
    {"NameTooLong", DEVICE_HEAD "name = \"" "0123456789012345678901234567890123456789012345678901234567890123" "\"\n", {},
     "t.toml:3:8: device[0].name: \"0123456789012345678901234567890123456789012345678901234567890123\": longer "
     "than 63 characters"},

    // ---- devargs and kind --------------------------------------------------------------------
    {"MissingDevargs", "progress = \"thread\"\n[[device]]\naddresses = [\"10.0.0.1/24\"]\n", {},
     "t.toml:2:1: device[0].devargs: missing; a \"dpdk\" device needs DPDK devargs such as \"net_tap0,iface=tap0\""},
    {"EmptyDevargs", "[[device]]\ndevargs = \"\"\n", {},
     "t.toml:2:11: device[0].devargs: must not be empty (DPDK devargs such as \"net_tap0,iface=tap0\")"},
    {"DevargsWithSpace", "[[device]]\ndevargs = \"net_tap0, iface=tap0\"\n", {},
     "t.toml:2:11: device[0].devargs: \"net_tap0, iface=tap0\": devargs contain no spaces or control characters"},
    {"DevargsWithoutDevice", "[[device]]\ndevargs = \",iface=tap0\"\n", {},
     "t.toml:2:11: device[0].devargs: \",iface=tap0\": the device name before the first ',' is missing"},
    {"SimWithDevargs", "[[device]]\nkind = \"sim\"\ndevargs = \"net_ring0\"\n", {},
     "t.toml:3:11: device[0].devargs: a \"sim\" device takes none"},
    {"KindUnknown", DEVICE_HEAD "kind = \"hw\"\n", {}, "t.toml:3:8: device[0].kind: \"hw\" is not \"dpdk\" or \"sim\""},
    {"LossRecoveryUnknown", DEVICE_HEAD "loss_recovery = \"sack\"\n", {},
     "t.toml:3:17: device[0].loss_recovery: \"sack\" is not \"go-back-n\" or \"selective\""},
    {"LossRecoveryNotAString", DEVICE_HEAD "loss_recovery = true\n", {},
     "t.toml:3:17: device[0].loss_recovery: expected a string (\"go-back-n\" or \"selective\"), got a boolean"},
    {"SprayPortsZero", DEVICE_HEAD "loss_recovery = \"selective\"\nspray_ports = 0\n", {},
     "t.toml:4:15: device[0].spray_ports: 0 is out of range 1..64"},
    {"SprayPortsTooMany", DEVICE_HEAD "loss_recovery = \"selective\"\nspray_ports = 65\n", {},
     "t.toml:4:15: device[0].spray_ports: 65 is out of range 1..64"},
    {"SprayWithoutSelective", DEVICE_HEAD "spray_ports = 8\n", {},
     "t.toml:3:15: device[0].spray_ports: needs loss_recovery = \"selective\" (spraying reorders packets)"},
    {"SprayWithEnvGoBackN", DEVICE_HEAD "loss_recovery = \"selective\"\nspray_ports = 8\n",
     {{"UROCE_LOSS_RECOVERY", "go-back-n"}},
     "t.toml:4:15: device[0].spray_ports: needs loss_recovery = \"selective\" (spraying reorders packets)"},
    {"EngineLcoresZero", DEVICE_HEAD "engine_lcores = 0\n", {},
     "t.toml:3:17: device[0].engine_lcores: 0 is out of range 1..8"},
    {"EngineLcoresTooMany", DEVICE_HEAD "engine_lcores = 9\n", {},
     "t.toml:3:17: device[0].engine_lcores: 9 is out of range 1..8"},
    {"EngineLcoresInline", "progress = \"inline\"\n" DEVICE_HEAD "engine_lcores = 2\n", {},
     "t.toml:4:17: device[0].engine_lcores: needs engine threads (progress = \"thread\", not \"inline\")"},
    {"EngineLcoresWithCapture", DEVICE_HEAD "engine_lcores = 2\n", {{"UROCE_PCAP", "/tmp/x.pcap"}},
     "t.toml:3:17: device[0].engine_lcores: a capture (pcap) needs engine_lcores = 1"},
    {"EngineLcoresEnvOutOfRange", DEVICE_HEAD, {{"UROCE_ENGINE_LCORES", "12"}},
     "UROCE_ENGINE_LCORES: 12 is out of range 1..8"},
    {"CcUnknown", DEVICE_HEAD "cc = \"timely\"\n", {},
     "t.toml:3:6: device[0].cc: \"timely\" is not \"dcqcn\", \"delay\" or \"none\""},
    {"DelayOutOfRange", DEVICE_HEAD "[device.delay]\nmax_mdf_pct = 100\n", {},
     "t.toml:4:15: device[0].delay.max_mdf_pct: 100 is out of range 1..99"},
    {"EcnNotABoolean", DEVICE_HEAD "ecn = \"on\"\n", {},
     "t.toml:3:7: device[0].ecn: expected a boolean, got a string"},
    {"DcqcnUnknownKeySuggested", DEVICE_HEAD "[device.dcqcn]\nrpg_time_rest_us = 3\n", {},
     "t.toml:4:1: device[0].dcqcn.rpg_time_rest_us: unknown key; did you mean \"rpg_time_reset_us\"?"},
    {"DcqcnOutOfRange", DEVICE_HEAD "[device.dcqcn]\ncnp_dscp = 64\n", {},
     "t.toml:4:12: device[0].dcqcn.cnp_dscp: 64 is out of range 0..63"},
    {"DcqcnFlagNotABoolean", DEVICE_HEAD "[device.dcqcn]\nclamp_tgt_rate = 1\n", {},
     "t.toml:4:18: device[0].dcqcn.clamp_tgt_rate: expected a boolean, got an integer"},
    {"DcqcnNotATable", DEVICE_HEAD "dcqcn = 3\n", {},
     "t.toml:3:9: device[0].dcqcn: expected a table, got an integer"},
    {"SamePortTwice", DEVICE_HEAD "[[device]]\ndevargs = \"net_ring0,nodeaction=x\"\n", {},
     "t.toml:4:11: device[1].devargs: DPDK device \"net_ring0\" is already device[0]'s"},

    // ---- global values ------------------------------------------------------------------------
    {"ProgressUnknown", "progress = \"poll\"\n", {}, "t.toml:1:12: progress: \"poll\" is not \"thread\" or \"inline\""},
    {"LogUnknown", "log = \"verbose\"\n", {},
     "t.toml:1:7: log: \"verbose\" is not \"error\", \"warning\", \"info\" or \"debug\""},
    {"LogUpperCase", "log = \"DEBUG\"\n", {},
     "t.toml:1:7: log: \"DEBUG\" is not \"error\", \"warning\", \"info\" or \"debug\""},
    {"HugepagesUnknown", "[eal]\nhugepages = \"maybe\"\n", {},
     "t.toml:2:13: eal.hugepages: \"maybe\" is not \"auto\", \"yes\" or \"no\""},
    {"PcapEmpty", "pcap = \"\"\n", {}, "t.toml:1:8: pcap: must not be empty"},
    {"EalExtraEmpty", "[eal]\nextra = [\"\"]\n", {}, "t.toml:2:10: eal.extra[0]: must not be empty"},

    // ---- the first error in file order is the one reported ----------------------------------------
    {"FirstErrorInFileOrder", "progress = \"poll\"\nlog = \"verbose\"\n", {},
     "t.toml:1:12: progress: \"poll\" is not \"thread\" or \"inline\""},
    {"FirstErrorInFileOrderNotByName", "log = \"verbose\"\nprogress = \"poll\"\n", {},
     "t.toml:1:7: log: \"verbose\" is not \"error\", \"warning\", \"info\" or \"debug\""},

    // ---- the environment -----------------------------------------------------------------------
    {"EnvMtuNotANumber", DEVICE_HEAD, {{"UROCE_MTU", "abc"}}, "UROCE_MTU: \"abc\" is not a decimal integer"},
    {"EnvLossRecoveryUnknown", DEVICE_HEAD, {{"UROCE_LOSS_RECOVERY", "Selective"}},
     "UROCE_LOSS_RECOVERY: \"Selective\" is not \"go-back-n\" or \"selective\""},
    {"EnvEcnUnknown", DEVICE_HEAD, {{"UROCE_ECN", "yes"}}, "UROCE_ECN: \"yes\" is not \"on\" or \"off\""},
    {"EnvCcUnknown", DEVICE_HEAD, {{"UROCE_CC", "DCQCN"}}, "UROCE_CC: \"DCQCN\" is not \"dcqcn\", \"delay\" or \"none\""},
    {"EnvMtuTrailingJunk", DEVICE_HEAD, {{"UROCE_MTU", "1500b"}}, "UROCE_MTU: \"1500b\" is not a decimal integer"},
    {"EnvMtuOutOfRange", DEVICE_HEAD, {{"UROCE_MTU", "12000"}}, "UROCE_MTU: 12000 is out of range 256..9000"},
    {"EnvMtuOverflow", DEVICE_HEAD, {{"UROCE_MTU", "99999999999999999999"}},
     "UROCE_MTU: 99999999999999999999 is out of range 256..9000"},
    {"EnvIpThreeOctets", DEVICE_HEAD, {{"UROCE_IP", "1.2.3/24"}},
     "UROCE_IP: \"1.2.3/24\": an IPv4 address has 4 octets, this has 3"},
    {"EnvIpSecondEntryBad", DEVICE_HEAD, {{"UROCE_IP", "10.0.0.1/24, fd00::1/200"}},
     "UROCE_IP: \"fd00::1/200\": prefix length 200 is out of range 0..128"},
    {"EnvIpEmptyEntry", DEVICE_HEAD, {{"UROCE_IP", "10.0.0.1/24,,fd00::1/64"}},
     "UROCE_IP: entry 2 of the list is empty"},
    {"EnvIpDuplicate", DEVICE_HEAD, {{"UROCE_IP", "10.0.0.1/24,10.0.0.1/8"}},
     "UROCE_IP: \"10.0.0.1/8\": the address is already entry 1"},
    {"EnvIpWithoutDevice", "", {{"UROCE_IP", "10.0.0.1/24"}},
     "UROCE_IP: there is no device to apply it to (set UROCE_DEVICE or add a [[device]] to the file)"},
    {"EnvMacBad", DEVICE_HEAD, {{"UROCE_MAC", "zz"}},
     "UROCE_MAC: \"zz\": not a MAC address (six hex pairs like \"02:00:00:00:00:01\")"},
    {"EnvProgressBad", "", {{"UROCE_PROGRESS", "fast"}}, "UROCE_PROGRESS: \"fast\" is not \"thread\" or \"inline\""},
    {"EnvLogBad", "", {{"UROCE_LOG", "trace"}},
     "UROCE_LOG: \"trace\" is not \"error\", \"warning\", \"info\" or \"debug\""},
    {"EnvDeviceWithSpace", "", {{"UROCE_DEVICE", "net_tap0 iface=tap0"}},
     "UROCE_DEVICE: \"net_tap0 iface=tap0\": devargs contain no spaces or control characters"},
    {"EnvDeviceClashesWithSecond", DEVICE_HEAD "[[device]]\ndevargs = \"net_tap0\"\n",
     {{"UROCE_DEVICE", "net_tap0,iface=x"}},
     "t.toml:4:11: device[1].devargs: DPDK device \"net_tap0\" is already device[0]'s"},
    {"EnvFileErrorComesFirst", "log = \"verbose\"\n", {{"UROCE_LOG", "trace"}},
     "t.toml:1:7: log: \"verbose\" is not \"error\", \"warning\", \"info\" or \"debug\""},

    // ---- the file itself -----------------------------------------------------------------------
    {"ConfigFileMissing", "", {{"UROCE_CONFIG", "/nonexistent/uroce.toml"}},
     "UROCE_CONFIG: cannot read \"/nonexistent/uroce.toml\": No such file or directory", From::kLoad},
    {"ConfigFileIsADirectory", "", {{"UROCE_CONFIG", "/"}}, "UROCE_CONFIG: cannot read \"/\": Is a directory",
     From::kLoad},
};

class BadConfig : public testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, IsRejectedWithItsMessage) {
  const BadCase& c = GetParam();
  const EnvLookup env = env_from_map(c.env);
  const ConfigResult<Config> r =
      c.from == From::kText ? parse_config(c.toml, "t.toml", env) : load_config(env, kNoDefaultFile);
  ASSERT_FALSE(r.ok()) << "accepted:\n" << render_config(*r);
  EXPECT_EQ(r.error().message(), c.expected);
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfig, testing::ValuesIn(kBadCases),
                         [](const testing::TestParamInfo<BadCase>& p) { return std::string(p.param.name); });

// The parts of an error are there for programs too, not only the message.
TEST(ConfigError, CarriesSourcePositionKeyAndReason) {
  const auto r = parse_config(DEVICE_HEAD "[[device]]\ndevargs = \"net_ring1\"\nmtu = 12000\n", "/etc/uroce.toml",
                              env_from_map({}));
  ASSERT_FALSE(r.ok());
  const ConfigError& e = r.error();
  EXPECT_EQ(e.source, "/etc/uroce.toml");
  ASSERT_TRUE(e.pos.has_value());
  EXPECT_EQ(*e.pos, (SourcePos{5, 7}));
  EXPECT_EQ(e.key, "device[1].mtu");
  EXPECT_EQ(e.reason, "12000 is out of range 256..9000");
  EXPECT_EQ(e.message(), "/etc/uroce.toml:5:7: device[1].mtu: 12000 is out of range 256..9000");
}

TEST(ConfigError, EnvironmentErrorsHaveNoFile) {
  const auto r = parse_config("", "t.toml", env_from_map({{"UROCE_MTU", "1500"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().source, "");
  EXPECT_FALSE(r.error().pos.has_value());
  EXPECT_EQ(r.error().key, "UROCE_MTU");
}

TEST(BadConfigTable, HasEnoughCases) { EXPECT_GE(std::size(kBadCases), 25u); }

}  // namespace
}  // namespace uroce::config
