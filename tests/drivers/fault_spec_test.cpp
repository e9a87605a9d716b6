// UROCE_FAULTS: the parser accepts what fault.hpp documents and rejects
// everything else with "<key>: <reason>".
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "drivers/fault.hpp"

namespace uroce::drivers {
namespace {

TEST(FaultSpecParse, EmptyMeansNoFaults) {
  for (const char* text : {"", "   "}) {
    auto r = parse_fault_spec(text);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(*r, FaultSpec{});
    EXPECT_FALSE(r->active());
  }
}

TEST(FaultSpecParse, FullExampleFromTheHeader) {
  auto r = parse_fault_spec(
      "drop=0.01,dup=0.001,reorder=0.01,reorder_window=8,corrupt=0.001,corrupt_bits=1,"
      "delay_us=50,jitter_us=10,rate_mbps=1000,dir=rx,seed=42");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->drop, 0.01);
  EXPECT_DOUBLE_EQ(r->dup, 0.001);
  EXPECT_DOUBLE_EQ(r->reorder, 0.01);
  EXPECT_EQ(r->reorder_window, 8u);
  EXPECT_DOUBLE_EQ(r->corrupt, 0.001);
  EXPECT_EQ(r->corrupt_bits, 1u);
  EXPECT_EQ(r->delay_ns, 50'000u);
  EXPECT_EQ(r->jitter_ns, 10'000u);
  EXPECT_EQ(r->rate_bps, 1'000'000'000u);
  EXPECT_EQ(r->dir, FaultDir::kRx);
  EXPECT_EQ(r->seed, 42u);
  EXPECT_TRUE(r->active());
}

struct Good {
  const char* text;
  FaultSpec expected;
};

FaultSpec with(void (*edit)(FaultSpec&)) {
  FaultSpec s;
  edit(s);
  return s;
}

TEST(FaultSpecParse, GoodSpecs) {
  const Good cases[] = {
      {"drop=1", with([](FaultSpec& s) { s.drop = 1; })},
      {"drop=0", FaultSpec{}},
      {" drop = 0.5 , dup=0.25 ", with([](FaultSpec& s) { s.drop = 0.5; s.dup = 0.25; })},
      {"reorder=1e-3", with([](FaultSpec& s) { s.reorder = 0.001; })},
      {"reorder_window=1024", with([](FaultSpec& s) { s.reorder_window = 1024; })},
      {"reorder_hold_us=0.001", with([](FaultSpec& s) { s.reorder_hold_ns = 1; })},
      {"corrupt_bits=64", with([](FaultSpec& s) { s.corrupt_bits = 64; })},
      {"delay_us=0.5", with([](FaultSpec& s) { s.delay_ns = 500; })},
      {"delay_us=10000000", with([](FaultSpec& s) { s.delay_ns = 10'000'000'000; })},
      {"jitter_us=0", FaultSpec{}},
      {"rate_mbps=0.5", with([](FaultSpec& s) { s.rate_bps = 500'000; })},
      {"rate_mbps=0", FaultSpec{}},
      {"ce=0.25", with([](FaultSpec& s) { s.ce = 0.25; })},
      {"rate_mbps=100,ecn_mark_us=20", with([](FaultSpec& s) { s.rate_bps = 100'000'000; s.ecn_mark_ns = 20'000; })},
      {"dir=tx", with([](FaultSpec& s) { s.dir = FaultDir::kTx; })},
      {"dir=both", FaultSpec{}},
      {"seed=18446744073709551615", with([](FaultSpec& s) { s.seed = UINT64_MAX; })},
      {"seed=0", with([](FaultSpec& s) { s.seed = 0; })},
  };
  for (const auto& c : cases) {
    auto r = parse_fault_spec(c.text);
    ASSERT_TRUE(r) << c.text << ": " << r.error().message;
    EXPECT_EQ(*r, c.expected) << c.text << " parsed as " << to_string(*r);
  }
}

struct Bad {
  const char* text;
  const char* error;
};

TEST(FaultSpecParse, BadSpecsNameTheKeyAndTheReason) {
  const Bad cases[] = {
      {"loss=0.1", "loss: unknown key (known: drop, dup, reorder, reorder_window, reorder_hold_us, corrupt, "
                   "corrupt_bits, delay_us, jitter_us, rate_mbps, ce, ecn_mark_us, dir, seed)"},
      {"drop", "drop: expected key=value"},
      {"drop=", "drop: empty value"},
      {"drop=x", "drop: 'x' is not a number"},
      {"drop=0.1x", "drop: '0.1x' is not a number"},
      {"drop=nan", "drop: 'nan' is not a number"},
      {"drop=inf", "drop: 'inf' is not a number"},
      {"drop=1.5", "drop: '1.5' is outside [0, 1]"},
      {"dup=-0.1", "dup: '-0.1' is outside [0, 1]"},
      {"reorder=2", "reorder: '2' is outside [0, 1]"},
      {"corrupt=+0.1", "corrupt: '+0.1' is not a number"},
      {"reorder_window=0", "reorder_window: '0' is outside [1, 1024]"},
      {"reorder_window=1025", "reorder_window: '1025' is outside [1, 1024]"},
      {"reorder_window=2.5", "reorder_window: '2.5' is not a whole number"},
      {"reorder_window=-1", "reorder_window: '-1' is not a whole number"},
      {"reorder_hold_us=0", "reorder_hold_us: '0' is outside [0.001, 10000000]"},
      {"corrupt_bits=0", "corrupt_bits: '0' is outside [1, 64]"},
      {"corrupt_bits=65", "corrupt_bits: '65' is outside [1, 64]"},
      {"delay_us=-1", "delay_us: '-1' is outside [0, 10000000]"},
      {"delay_us=10000001", "delay_us: '10000001' is outside [0, 10000000]"},
      {"jitter_us=ten", "jitter_us: 'ten' is not a number"},
      {"rate_mbps=-5", "rate_mbps: '-5' is outside [0, 1000000]"},
      {"rate_mbps=1000001", "rate_mbps: '1000001' is outside [0, 1000000]"},
      {"ce=1.5", "ce: '1.5' is outside [0, 1]"},
      {"ecn_mark_us=20", "ecn_mark_us: marks frames that wait for the link: it needs rate_mbps"},
      {"rate_mbps=10,ecn_mark_us=-1", "ecn_mark_us: '-1' is outside [0, 10000000]"},
      {"dir=up", "dir: 'up' is not rx, tx or both"},
      {"dir=rx|tx", "dir: 'rx|tx' is not rx, tx or both"},
      {"seed=-1", "seed: '-1' is not a whole number"},
      {"seed=18446744073709551616", "seed: '18446744073709551616' is outside [0, 18446744073709551615]"},
      {"drop=0.1,drop=0.2", "drop: given twice"},
      {"drop=0.1,,dup=0.1", "item 2: empty (two commas in a row?)"},
      {"drop=0.1,", "item 2: empty (two commas in a row?)"},
      {"=0.1", ": unknown key (known: drop, dup, reorder, reorder_window, reorder_hold_us, corrupt, "
               "corrupt_bits, delay_us, jitter_us, rate_mbps, ce, ecn_mark_us, dir, seed)"},
  };
  for (const auto& c : cases) {
    auto r = parse_fault_spec(c.text);
    ASSERT_FALSE(r) << c.text << " was accepted as " << to_string(*r);
    EXPECT_EQ(r.error().message, c.error) << c.text;
    EXPECT_EQ(r.error().code, EINVAL) << c.text;
  }
}

TEST(FaultSpecParse, ToStringRoundTrips) {
  FaultSpec s;
  s.drop = 0.013;
  s.dup = 1e-4;
  s.reorder = 0.3333333333333333;
  s.reorder_window = 17;
  s.reorder_hold_ns = 2'500;
  s.corrupt = 1;
  s.corrupt_bits = 3;
  s.delay_ns = 50'001;
  s.jitter_ns = 7;
  s.rate_bps = 123'456'789;
  s.ce = 0.125;
  s.ecn_mark_ns = 30'000;
  s.dir = FaultDir::kTx;
  s.seed = 987654321987654321ULL;
  auto r = parse_fault_spec(to_string(s));
  ASSERT_TRUE(r) << to_string(s) << ": " << r.error().message;
  EXPECT_EQ(*r, s) << to_string(s);
  EXPECT_EQ(to_string(FaultSpec{}),
            "drop=0,dup=0,reorder=0,reorder_window=8,reorder_hold_us=1000,corrupt=0,corrupt_bits=1,"
            "delay_us=0,jitter_us=0,rate_mbps=0,ce=0,ecn_mark_us=0,dir=both,seed=1");
}

TEST(FaultSpecValidate, RejectsWhatTheParserWould) {
  FaultSpec s;
  EXPECT_TRUE(validate(s));
  s.drop = -0.5;
  EXPECT_EQ(validate(s).error().message, "drop: -0.5 is outside [0, 1]");
  s = {};
  s.reorder_window = 0;
  EXPECT_EQ(validate(s).error().message, "reorder_window: 0 is outside [1, 1024]");
  s = {};
  s.corrupt_bits = 100;
  EXPECT_EQ(validate(s).error().message, "corrupt_bits: 100 is outside [1, 64]");
  s = {};
  s.delay_ns = kMaxFaultTimeNs + 1;
  EXPECT_EQ(validate(s).error().message, "delay_us: 10000000001 is outside [0, 10000000000] ns");
  s = {};
  s.dir = static_cast<FaultDir>(0);
  EXPECT_EQ(validate(s).error().message, "dir: 0 is not rx, tx or both");
}

TEST(FaultSpecEnv, ReadsUroceFaults) {
  ::unsetenv("UROCE_FAULTS");
  EXPECT_FALSE(fault_spec_from_env().has_value());
  ::setenv("UROCE_FAULTS", "drop=0.25,seed=7", 1);
  auto r = fault_spec_from_env();
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(*r);
  EXPECT_DOUBLE_EQ((*r)->drop, 0.25);
  EXPECT_EQ((*r)->seed, 7u);
  ::setenv("UROCE_FAULTS", "drop=2", 1);
  r = fault_spec_from_env();
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().message, "drop: '2' is outside [0, 1]");
  ::unsetenv("UROCE_FAULTS");
}

}  // namespace
}  // namespace uroce::drivers
