// Head inspection: .npy and PNG I/O, and `mhagen heads` / `explain --plot`
// run as a user would, on a hand-set layer whose answer is known.
#include "mhagen/inspect/HeadInspection.h"
#include "mhagen/inspect/Npy.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace mhagen;
using namespace mhagen::inspect;

namespace {

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A version 1.0 .npy header for `dict`, padded as numpy pads it.
std::string npyHeader(const std::string &dict) {
  std::string h = dict;
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h;
}

std::string npyError(const std::string &bytes) {
  try {
    parseNpy(bytes, "t.npy");
  } catch (const NpyError &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(Npy, RoundTripsF32AndReadsF64) {
  TempDir dir("npy");
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f};
  writeNpy(dir.file("a.npy"), {2, 3}, v.data());
  NpyArray a = readNpy(dir.file("a.npy"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, "<f4");
  EXPECT_EQ(a.data, v);
  // The data starts at a multiple of 64 bytes, as numpy aligns it.
  EXPECT_EQ((slurp(dir.file("a.npy")).size() - v.size() * 4) % 64, 0u);
  // f64, as numpy.save writes float64 by default.
  std::string f64 =
      npyHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }");
  for (double x : {0.5, -4.0, 1e10}) {
    char b[8];
    std::memcpy(b, &x, 8);
    f64.append(b, 8);
  }
  NpyArray d = parseNpy(f64, "f64.npy");
  EXPECT_EQ(d.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(d.data, (std::vector<float>{0.5f, -4.0f, 1e10f}));
}

TEST(Npy, RefusesWhatItCannotReadWithTheReason) {
  const std::string ok =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data(8, '\0');
  EXPECT_NE(npyError("hello").find("no \\x93NUMPY magic"), std::string::npos);
  EXPECT_NE(npyError(npyHeader("{'descr': '<i4', 'fortran_order': False, "
                               "'shape': (2,), }") +
                     data)
                .find("dtype '<i4'"),
            std::string::npos);
  EXPECT_NE(npyError(npyHeader("{'descr': '>f4', 'fortran_order': False, "
                               "'shape': (2,), }") +
                     data)
                .find("little-endian"),
            std::string::npos);
  EXPECT_NE(npyError(npyHeader("{'descr': '<f4', 'fortran_order': True, "
                               "'shape': (2,), }") +
                     data)
                .find("fortran_order is True"),
            std::string::npos);
  EXPECT_NE(npyError(npyHeader(ok) + data.substr(0, 7))
                .find("needs 8 data bytes, the file holds 7"),
            std::string::npos);
  EXPECT_NE(npyError(npyHeader("{'descr': '<f4', 'shape': (2,), }") + data)
                .find("needs 'descr', 'fortran_order' and 'shape'"),
            std::string::npos);
  EXPECT_NE(npyError(npyHeader("{'descr': '<f4', 'fortran_order': False, "
                               "'shape': (2, x), }") +
                     data)
                .find("non-negative integers"),
            std::string::npos);
  std::string huge = npyHeader(ok);
  huge[8] = '\xff';
  huge[9] = '\xff';
  EXPECT_NE(npyError(huge).find("runs past the file"), std::string::npos);
  EXPECT_EQ(npyError(npyHeader(ok) + data), "");
}

TEST(Image, PngRoundTripAndColourMap) {
  TempDir dir("png");
  Image img(20, 10);
  img.fill(2, 3, 4, 2, colormap(1.0));
  img.text(8, 1, "h0", kBlack);
  writePng(dir.file("a.png"), img);
  Image back = readPng(dir.file("a.png"));
  ASSERT_EQ(back.width(), 20);
  ASSERT_EQ(back.height(), 10);
  EXPECT_EQ(back.rgb(), img.rgb());
  EXPECT_EQ(back.at(3, 4), (Rgb{253, 231, 37})); // yellow: weight 1
  EXPECT_EQ(colormap(0.0), (Rgb{68, 1, 84}));    // dark blue: weight 0
  EXPECT_EQ(colormap(-1.0), colormap(0.0));      // clamped
  EXPECT_EQ(colormap(NAN), colormap(0.0));
  // The glyph of 'h' has its stem in the first column.
  EXPECT_EQ(back.at(8, 1), kBlack);
  EXPECT_THROW(readPng(dir.file("missing.png")), ImageError);
}

// The hand-set layer of the issue: d = 8, two heads of width 8, T = 8,
// causal, x = the identity (token t is e_t). Head 0 attends only to the
// previous token: q_t = 100 e_t, k_t = e_(t+1), so q_i . k_j = 100 when
// j = i - 1 (row 0 sees only itself). Head 1 has W_Q = 0: uniform weights
// over the i + 1 keys row i sees, entropy ln(i + 1).
class HeadsCli : public testing::Test {
protected:
  TempDir dir{"heads"};
  std::string files;

  void SetUp() override {
    const int d = 8, T = 8;
    std::vector<float> x(T * d, 0.0f), wq(d * 16, 0.0f), wk(d * 16, 0.0f),
        wv(d * 16, 0.0f), wo(16 * d, 0.0f);
    for (int t = 0; t < T; ++t)
      x[t * d + t] = 1.0f;
    for (int i = 0; i < d; ++i) {
      wq[i * 16 + i] = 100.0f; // head 0 only
      if (i + 1 < 8)
        wk[i * 16 + i + 1] = 1.0f; // K/V head 0: e_t -> e_(t+1)
      wv[i * 16 + i] = wv[i * 16 + 8 + i] = 1.0f;
      wo[i * d + i] = 1.0f;
    }
    writeNpy(dir.file("x.npy"), {T, d}, x.data());
    writeNpy(dir.file("w_q.npy"), {d, 16}, wq.data());
    writeNpy(dir.file("w_k.npy"), {d, 16}, wk.data());
    writeNpy(dir.file("w_v.npy"), {d, 16}, wv.data());
    writeNpy(dir.file("w_o.npy"), {16, d}, wo.data());
    files = dir.file("w_q.npy") + "," + dir.file("w_k.npy") + "," +
            dir.file("w_v.npy") + "," + dir.file("w_o.npy");
  }

  ProcessResult heads(std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        MHAGEN_BINARY, "heads", "--d",    "8",      "--h", "2",
        "--dk",        "8",     "--mask", "causal", "-o",  dir.file("out")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return runProcess(argv, 300);
  }
};

TEST_F(HeadsCli, PreviousTokenHeadHasZeroEntropyAndAShiftedIdentity) {
  ProcessResult r = heads({"--x", dir.file("x.npy"), "--weights", files,
                           "--format", "json", "--per-row"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // stdout and stderr come together: a sanitizer's note may precede the
  // report, which starts at its first "{" line.
  const size_t start = r.output.find("{\n");
  ASSERT_NE(start, std::string::npos) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  EXPECT_TRUE(j["within_tolerance"].get<bool>());
  EXPECT_EQ(j["T"], 8);
  EXPECT_NEAR(j["heads"][0]["mean_entropy_nats"].get<double>(), 0.0, 1e-4);
  EXPECT_NEAR(j["heads"][1]["mean_entropy_nats"].get<double>(),
              std::log(40320.0) / 8, 1e-4); // mean of ln(i + 1), i < 8
  // entropy.npy [h, T]: 0 for head 0, ln(i + 1) for head 1.
  NpyArray e = readNpy(dir.file("out/entropy.npy"));
  ASSERT_EQ(e.shape, (std::vector<int64_t>{2, 8}));
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(e.data[i], 0.0, 1e-4) << "row " << i;
    EXPECT_NEAR(e.data[8 + i], std::log(i + 1.0), 1e-4) << "row " << i;
  }
  // weights.npy [h, T, T]: head 0 is the shifted identity.
  NpyArray w = readNpy(dir.file("out/weights.npy"));
  ASSERT_EQ(w.shape, (std::vector<int64_t>{2, 8, 8}));
  for (int i = 0; i < 8; ++i)
    for (int jj = 0; jj < 8; ++jj)
      EXPECT_NEAR(w.data[i * 8 + jj], jj == std::max(0, i - 1) ? 1.0 : 0.0,
                  1e-4)
          << i << "," << jj;
  // The heatmap of head 0: its size, a cell on the shifted diagonal
  // (weight 1), one beside it (weight 0) and one the mask hides.
  Image img = readPng(dir.file("out/head_00.png"));
  const HeatmapLayout l = heatmapLayout(8);
  EXPECT_EQ(img.width(), l.width);
  EXPECT_EQ(img.height(), l.height);
  EXPECT_EQ(img.at(l.pixelX(2), l.pixelY(3)), colormap(1.0));
  EXPECT_EQ(img.at(l.pixelX(3), l.pixelY(3)), colormap(0.0));
  EXPECT_EQ(img.at(l.pixelX(5), l.pixelY(3)), kHidden);
  // Head 1: row 3 spreads 1/4 over keys 0..3.
  Image uniform = readPng(dir.file("out/head_01.png"));
  EXPECT_EQ(uniform.at(l.pixelX(0), l.pixelY(3)), colormap(0.25));
  // The grid holds both heads.
  EXPECT_GT(readPng(dir.file("out/heads.png")).width(), 2 * 8);
}

TEST_F(HeadsCli, SeededRandomInputsAndTextReport) {
  ProcessResult r = heads({"--T", "12", "--no-png"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("head  kv  mean entropy (nats)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": OK"), std::string::npos) << r.output;
  NpyArray e = readNpy(dir.file("out/entropy.npy"));
  ASSERT_EQ(e.shape, (std::vector<int64_t>{2, 12}));
  for (size_t i = 0; i < e.data.size(); ++i) {
    const double row = static_cast<double>(i % 12);
    EXPECT_GE(e.data[i], 0.0);
    EXPECT_LE(e.data[i], std::log(row + 1.0) + 1e-4); // at most uniform
  }
}

// The weights are rebuilt from q and k as the layer makes them: after the
// QK-norm and the rotary positions. Each row then sums to 1 with the
// kernel's lse; without them in the rebuild it would not.
TEST_F(HeadsCli, WeightsFollowQkNormAndRotaryPositions) {
  ProcessResult r =
      heads({"--T", "12", "--qk-norm", "head", "--rope", "half(theta = 10000)",
             "--no-png", "--format", "json"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const size_t start = r.output.find("{\n");
  ASSERT_NE(start, std::string::npos) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  EXPECT_TRUE(j["within_tolerance"].get<bool>());
  EXPECT_LT(j["lse_normalisation_error"].get<double>(), 1e-5);
  ProcessResult wrong = heads({"--T", "12", "--norms", "a.npy,b.npy"});
  EXPECT_NE(wrong.exitCode, 0);
  EXPECT_NE(wrong.output.find("--norms given but the spec has qk_norm = none"),
            std::string::npos)
      << wrong.output;
  ProcessResult cached = heads({"--T", "12", "--kv-cache", "contiguous"});
  EXPECT_NE(cached.exitCode, 0);
  EXPECT_NE(cached.output.find("heads inspects a layer over its own tokens"),
            std::string::npos)
      << cached.output;
}

// A learned sink is one more outcome of every row: the bound on a row's
// entropy is ln(keys + 1), and no row exceeds it.
TEST_F(HeadsCli, EntropyBoundCountsTheSink) {
  ProcessResult r = heads({"--T", "40", "--sinks", "learned", "--no-png",
                           "--format", "json", "--per-row"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const size_t start = r.output.find("{\n");
  ASSERT_NE(start, std::string::npos) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  const std::vector<double> bound = j["entropy_bound_nats"];
  ASSERT_EQ(bound.size(), 40u);
  double mean = 0;
  for (int i = 0; i < 40; ++i) {
    EXPECT_NEAR(bound[i], std::log(i + 2.0), 1e-12) << "row " << i;
    mean += bound[i] / 40;
  }
  EXPECT_NEAR(j["mean_entropy_bound_nats"].get<double>(), mean, 1e-12);
  for (const auto &head : j["heads"]) {
    const std::vector<double> e = head["entropy_nats"];
    for (int i = 0; i < 40; ++i)
      EXPECT_LE(e[i], bound[i] + 1e-6) << "row " << i;
  }
}

TEST_F(HeadsCli, BadInputsNameTheFileAndTheRule) {
  spit(dir.file("junk.npy"), "not an array");
  ProcessResult r = heads({"--x", dir.file("junk.npy")});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("junk.npy: not a .npy array mhagen reads"),
            std::string::npos)
      << r.output;
  // x of the wrong width.
  std::vector<float> x(8 * 5, 0.0f);
  writeNpy(dir.file("x5.npy"), {8, 5}, x.data());
  r = heads({"--x", dir.file("x5.npy")});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("x must have shape [T, 8] or [1, T, 8], not [8, 5]"),
            std::string::npos)
      << r.output;
  // Weights swapped: w_o where w_q belongs has the wrong shape.
  r = heads({"--weights", dir.file("w_o.npy") + "," + dir.file("w_k.npy") +
                              "," + dir.file("w_v.npy") + "," +
                              dir.file("w_o.npy")});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("w_q must have shape [8, 16], not [16, 8]"),
            std::string::npos)
      << r.output;
  // More tokens than heads inspects: refused before any weight is drawn.
  std::vector<float> tall(4097 * 8, 0.0f);
  writeNpy(dir.file("tall.npy"), {4097, 8}, tall.data());
  r = heads({"--x", dir.file("tall.npy")});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.output.find("x has 4097 tokens; heads rebuilds h x T x T "
                          "weights and inspects at most 4096"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/weights.npy")));
  // A NaN in x or a weight: named, not reported as a failed check.
  std::vector<float> xnan(8 * 8, 0.0f);
  xnan[13] = std::nanf("");
  writeNpy(dir.file("xnan.npy"), {8, 8}, xnan.data());
  r = heads({"--x", dir.file("xnan.npy")});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("xnan.npy: input is not finite: x element 13 is nan"),
            std::string::npos)
      << r.output;
  std::vector<float> winf(8 * 16, 0.0f);
  winf[5] = INFINITY;
  writeNpy(dir.file("winf.npy"), {8, 16}, winf.data());
  r = heads({"--weights", dir.file("winf.npy") + "," + dir.file("w_k.npy") +
                              "," + dir.file("w_v.npy") + "," +
                              dir.file("w_o.npy")});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(
      r.output.find("winf.npy: input is not finite: w_q element 5 is inf"),
      std::string::npos)
      << r.output;
  r = runProcess({MHAGEN_BINARY, "heads", "--op", "sdpa", "--d", "8", "--h",
                  "2", "-o", dir.file("out")},
                 60);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.output.find("heads runs a layer"), std::string::npos) << r.output;
}

TEST(ExplainPlot, HeadsAndKvGroupsAsColumnBlocks) {
  TempDir dir("plot");
  ProcessResult r =
      runProcess({MHAGEN_BINARY, "explain", "--d", "4096", "--h", "32", "--kv",
                  "8", "--plot", dir.file("split.png")},
                 60);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  AttentionSpec s =
      parseSpecs("spec a { d = 4096; h = 32; kv = 8 }", "t").at(0);
  const HeadSplitLayout l = headSplitLayout(s);
  Image img = readPng(dir.file("split.png"));
  EXPECT_EQ(img.width(), l.width);
  EXPECT_EQ(img.height(), l.height);
  const int qy = l.qY + l.bandH / 2, ky = l.kvY + l.bandH / 2;
  // Query heads 4..7 form K/V group 1: head 4 in the group's colour,
  // head 5 lighter, and K/V head 1 below in the group's colour.
  EXPECT_EQ(img.at(l.qBlockCenterX(4, 128), qy), groupColor(1, 8));
  EXPECT_EQ(img.at(l.qBlockCenterX(5, 128), qy), queryHeadColor(s, 5));
  EXPECT_NE(queryHeadColor(s, 5), groupColor(1, 8));
  EXPECT_EQ(img.at(l.kvBlockCenterX(1, 128), ky), groupColor(1, 8));
  EXPECT_NE(groupColor(1, 8), groupColor(2, 8));
  // Eight K/V heads of 128 columns take a quarter of the query band.
  EXPECT_EQ(img.at(l.kvBlockCenterX(7, 128), ky), groupColor(7, 8));
  EXPECT_EQ(img.at(l.qBlockCenterX(31, 128), ky), kWhite);
}
