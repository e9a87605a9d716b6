// The value parsers and helpers under the configuration: addresses,
// MACs, suggestions for typos, quoting, Result.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "lib/config/ip.hpp"
#include "lib/config/mac.hpp"
#include "lib/util/result.hpp"
#include "lib/config/text.hpp"

namespace uroce::config {
namespace {

using Bytes16 = std::array<uint8_t, 16>;

TEST(IpPrefix, Ipv4IsHeldMapped) {
  auto p = parse_ip_prefix("192.168.10.200/30");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->family(), IpFamily::kIpv4);
  EXPECT_EQ(p->prefix_len, 30);
  EXPECT_EQ(p->addr.bytes, (Bytes16{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 10, 200}));
  EXPECT_EQ(to_string(*p), "192.168.10.200/30");
}

TEST(IpPrefix, Ipv6) {
  auto p = parse_ip_prefix("2001:db8:0:0::7/128");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->family(), IpFamily::kIpv6);
  EXPECT_EQ(p->prefix_len, 128);
  EXPECT_EQ(p->addr.bytes, (Bytes16{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}));
  EXPECT_EQ(to_string(*p), "2001:db8::7/128") << "printed in RFC 5952 form";
}

// Whether a destination is on the link of one of the device's prefixes
// (else it goes through a gateway): the prefix's bits, the family.
TEST(IpPrefix, ContainsComparesThePrefixBitsOfOneFamily) {
  auto addr = [](const char* text) { return parse_ip_address(text)->bytes; };
  const IpPrefix v4 = *parse_ip_prefix("192.168.10.200/30");
  EXPECT_TRUE(prefix_contains(v4, addr("192.168.10.201")));
  EXPECT_TRUE(prefix_contains(v4, addr("192.168.10.203")));
  EXPECT_FALSE(prefix_contains(v4, addr("192.168.10.204")));
  EXPECT_FALSE(prefix_contains(v4, addr("192.168.11.200")));
  EXPECT_FALSE(prefix_contains(v4, addr("::ffff:c0a8:0bc8")));
  EXPECT_FALSE(prefix_contains(v4, addr("fe80::1"))) << "another family";
  EXPECT_TRUE(prefix_contains(*parse_ip_prefix("10.1.2.3/0"), addr("172.16.0.1")));
  EXPECT_FALSE(prefix_contains(*parse_ip_prefix("10.1.2.3/0"), addr("2001:db8::1")));
  EXPECT_TRUE(prefix_contains(*parse_ip_prefix("10.1.2.3/32"), addr("10.1.2.3")));
  EXPECT_FALSE(prefix_contains(*parse_ip_prefix("10.1.2.3/32"), addr("10.1.2.2")));
  const IpPrefix v6 = *parse_ip_prefix("2001:db8:0:7::1/60");
  EXPECT_TRUE(prefix_contains(v6, addr("2001:db8:0:f::9")));
  EXPECT_FALSE(prefix_contains(v6, addr("2001:db8:0:10::1")));
  EXPECT_FALSE(prefix_contains(v6, addr("10.0.0.1"))) << "another family";
  EXPECT_TRUE(prefix_contains(*parse_ip_prefix("fe80::1/64"), addr("fe80::abcd")));
}

TEST(IpPrefix, Boundaries) {
  EXPECT_TRUE(parse_ip_prefix("10.0.0.1/0").ok());
  EXPECT_TRUE(parse_ip_prefix("10.0.0.1/32").ok());
  EXPECT_TRUE(parse_ip_prefix("fe80::1/0").ok());
  EXPECT_TRUE(parse_ip_prefix("fe80::1/128").ok());
  EXPECT_TRUE(parse_ip_prefix("0.0.0.1/8").ok()) << "only 0.0.0.0 itself is unspecified";
  EXPECT_TRUE(parse_ip_prefix("255.255.255.254/31").ok()) << "only 255.255.255.255 is broadcast";
  EXPECT_EQ(parse_ip_prefix("255.255.255.255/32").error(),
            "\"255.255.255.255/32\": the broadcast address cannot be a device address");
  EXPECT_EQ(parse_ip_prefix("::/0").error(), "\"::/0\": an unspecified address cannot be a device address");
  EXPECT_EQ(parse_ip_prefix("10.0.0.1/").error(), "\"10.0.0.1/\": prefix length \"\" is not a decimal number");
  EXPECT_EQ(parse_ip_prefix("10.0.0.1/0033").error(), "\"10.0.0.1/0033\": prefix length 0033 is out of range 0..32");
  EXPECT_EQ(parse_ip_prefix("1.2.3.4.5/8").error(), "\"1.2.3.4.5/8\": an IPv4 address has 4 octets, this has 5");
  EXPECT_EQ(parse_ip_prefix("1.2.3.1000/8").error(), "\"1.2.3.1000/8\": octet 1000 is out of range 0..255");
  EXPECT_EQ(parse_ip_prefix("1.2.3.x/8").error(), "\"1.2.3.x/8\": octet \"x\" is not a decimal number");
  EXPECT_EQ(parse_ip_prefix("fe80::1%eth0/64").error(), "\"fe80::1%eth0/64\": not a valid IPv6 address");
}

TEST(IpAddress, MappedIpv6IsIpv4) {
  auto a = parse_ip_address("::ffff:10.0.0.1");
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(a->family, IpFamily::kIpv4);
  EXPECT_EQ(*a, IpAddr::ipv4({10, 0, 0, 1}));
  EXPECT_EQ(to_string(*a), "10.0.0.1");
  EXPECT_EQ(parse_ip_address("").error(), "\"\": empty address");
}

TEST(Mac, ParsesEitherCaseAndPrintsLower) {
  auto m = parse_mac("02:AB:cd:Ef:00:9F");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(*m, (wire::MacAddr{0x02, 0xab, 0xcd, 0xef, 0x00, 0x9f}));
  EXPECT_EQ(format_mac(*m), "02:ab:cd:ef:00:9f");
  EXPECT_FALSE(parse_mac("02:ab:cd:ef:00:9f:").ok());
  EXPECT_FALSE(parse_mac("2:ab:cd:ef:00:9f").ok());
  EXPECT_FALSE(parse_mac("").ok());
  EXPECT_TRUE(parse_mac("fe:ff:ff:ff:ff:ff").ok()) << "locally administered unicast";
  EXPECT_FALSE(parse_mac("ff:ff:ff:ff:ff:ff").ok()) << "broadcast is multicast";
}

TEST(Text, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("mtu", "mtu"), 0u);
  EXPECT_EQ(edit_distance("adresses", "addresses"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(Text, ClosestNeedsFewEditsAndFewerThanTheWordsLength) {
  constexpr std::array<std::string_view, 3> kKeys{"mac", "mtu", "vlan"};
  EXPECT_EQ(closest("mtv", kKeys, 2), "mtu");
  EXPECT_EQ(closest("vlna", kKeys, 2), "vlan");
  EXPECT_EQ(closest("ab", kKeys, 2), "") << "2 edits would rewrite all of a 2-letter word";
  EXPECT_EQ(closest("speed", kKeys, 2), "");
}

TEST(Text, QuoteEscapesLikeToml) {
  EXPECT_EQ(quote("plain"), "\"plain\"");
  EXPECT_EQ(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(quote("tab\tnl\n"), "\"tab\\tnl\\n\"");
  EXPECT_EQ(quote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(quote("\x7f"), "\"\\u007F\"");
  EXPECT_EQ(quote("\xc3\xa9"), "\"\xc3\xa9\"") << "UTF-8 passes through";
}

TEST(Text, KeyText) {
  EXPECT_EQ(key_text("memory_mb"), "memory_mb");
  EXPECT_EQ(key_text("a-b"), "a-b");
  EXPECT_EQ(key_text("a b"), "\"a b\"");
  EXPECT_EQ(key_text(""), "\"\"");
}

TEST(Result, ValueOrError) {
  Result<int, std::string> good = 5;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  Result<int, std::string> bad = Err{std::string("no")};
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), "no");
}

TEST(Result, SameValueAndErrorTypes) {
  Result<std::string, std::string> value = std::string("v");
  Result<std::string, std::string> error = Err{std::string("e")};
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "v");
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error(), "e");
}

}  // namespace
}  // namespace uroce::config
