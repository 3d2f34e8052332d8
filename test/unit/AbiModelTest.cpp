// The ABI model (mhagen/abi_model.hpp) is the one description of the
// kernels' tensors: these tests check that what is derived from it agrees
// with it (abi.h's table, the call-args accessors, both wrapper
// conventions, the runtime's view of sizes).
#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#ifndef MHAGEN_SOURCE_DIR
#error "MHAGEN_SOURCE_DIR must point at the source tree"
#endif

namespace mhagen {
namespace {

std::string readSource(const std::string &rel) {
  std::ifstream in(std::string(MHAGEN_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(AbiModel, AbiHeaderDocumentsTheModel) {
  // abi.h's comment is the model's table verbatim; regenerate it with
  // abi::docTable() when a tensor is added.
  const std::string header = readSource("runtime/include/mhagen/abi.h");
  EXPECT_NE(header.find(abi::docTable()), std::string::npos)
      << "runtime/include/mhagen/abi.h must contain:\n"
      << abi::docTable();
}

TEST(AbiModel, AccessorsReachTheirOwnMember) {
  // bind() and pointer() of a row touch the member the row names, and no
  // two rows of one op share a member (except `out`, one per op).
  static int cell;
  for (const abi::TensorModel &t : abi::allTensors()) {
    mhagen_call_args a{};
    t.bind(a, &cell);
    EXPECT_EQ(t.pointer(a), &cell) << t.name;
    for (const abi::TensorModel &u : abi::allTensors())
      if (std::string(u.name) != t.name)
        EXPECT_EQ(u.pointer(a), nullptr) << t.name << " vs " << u.name;
  }
}

TEST(AbiModel, PresenceFollowsTheSpec) {
  auto names = [](const abi::AbiShape &s) {
    std::string out;
    for (const abi::TensorModel *t : abi::tensors(s))
      out += std::string(out.empty() ? "" : " ") + t->name;
    return out;
  };
  abi::AbiShape sdpa{false, 64, 4, 2, 16, 16, false, false};
  EXPECT_EQ(names(sdpa), "q k v out");
  sdpa.padding = true;
  EXPECT_EQ(names(sdpa), "q k v kv_lens out");
  abi::AbiShape layer{true, 64, 4, 2, 16, 16, true, true};
  EXPECT_EQ(names(layer), "x w_q w_k w_v w_o b_q b_k b_v b_o kv_lens out");
  layer.bias = false;
  layer.padding = false;
  EXPECT_EQ(names(layer), "x w_q w_k w_v w_o out");
  // Score modifiers given per call: one f32 per query head, both ops.
  layer.sinks = true;
  EXPECT_EQ(names(layer), "x w_q w_k w_v w_o sinks out");
  sdpa.alibiSlopes = true;
  EXPECT_EQ(names(sdpa), "q k v kv_lens alibi_slopes out");
  // lse: a second output, after out (the kernels' parameter order).
  sdpa.lse = true;
  EXPECT_EQ(names(sdpa), "q k v kv_lens alibi_slopes out lse");
  for (const abi::TensorModel *t : abi::tensors(sdpa))
    if (std::string(t->name) == "alibi_slopes") {
      EXPECT_EQ(abi::dimsText(*t), "[h]");
      EXPECT_EQ(abi::scalarOf(*t, sdpa), abi::Scalar::F32);
      EXPECT_EQ(abi::denseInnerElements(*t, sdpa, 0), 4);
    }
  // ragged: q, out and lse packed, the offsets and every sequence's key
  // length; the kernel itself sees one sequence at a time.
  abi::AbiShape ragged{false, 64, 4, 2, 16, 16, false, false};
  ragged.lse = true;
  ragged.ragged = true;
  EXPECT_EQ(names(ragged), "q k v kv_lens q_offsets out lse");
  for (const abi::TensorModel *t : abi::tensors(ragged)) {
    const std::string n = t->name;
    if (n == "q" || n == "out" || n == "lse")
      EXPECT_TRUE(t->isPacked() && !t->isSequence()) << n;
    if (n == "q")
      EXPECT_EQ(abi::dimsText(*t), "[Nq, h, dk]");
    if (n == "q_offsets")
      EXPECT_EQ(abi::dimsText(*t), "[B+1]");
  }
  const abi::AbiShape kernel = abi::perSequence(ragged);
  EXPECT_EQ(names(kernel), "q k v kv_lens out lse");
  for (const abi::TensorModel *t : abi::tensors(kernel))
    EXPECT_FALSE(t->isPacked()) << t->name;
}

TEST(AbiModel, SizesAndText) {
  const abi::AbiShape s{true, 96, 6, 2, 16, 8, true, false};
  for (const abi::TensorModel *t : abi::tensors(s)) {
    if (std::string(t->name) == "w_v") {
      EXPECT_EQ(abi::dimsText(*t), "[d, kv*dv]");
      EXPECT_EQ(abi::denseInnerElements(*t, s, 0), 96 * 2 * 8);
    }
    if (std::string(t->name) == "x") {
      EXPECT_TRUE(t->isSequence());
      EXPECT_EQ(abi::denseInnerElements(*t, s, 2), 96);
    }
  }
  // Overflowing products are reported, not wrapped.
  const abi::AbiShape huge{true, INT64_MAX / 2, 4, 1, 4, 4, false, false};
  for (const abi::TensorModel *t : abi::tensors(huge))
    if (std::string(t->name) == "w_q")
      EXPECT_EQ(abi::denseInnerElements(*t, huge, 0), -1);
}

AttentionSpec spec(const std::string &fields) {
  return parseSpecs("spec t { " + fields + " }", "abi-test.mha").at(0);
}

TEST(AbiWrapper, BothConventionsCarryEveryTensor) {
  for (const char *flags :
       {"op = sdpa; d = 64; h = 4; kv = 2; mask = causal & padding; "
        "target = avx2",
        "op = layer; d = 64; h = 4; kv = 2; bias = true; mask = padding; "
        "target = avx2"}) {
    const AttentionSpec s = spec(flags);
    const backend::WrapperPlan plan = backend::wrapperPlan(s);
    const backend::HalideBufferCall h = backend::halideBufferCall(s, plan);
    const backend::MemrefCall m = backend::memrefCall(plan, "fn");
    const auto present = abi::tensors(backend::abiShapeOf(s));
    ASSERT_EQ(plan.tensors.size(), present.size()) << flags;
    for (size_t i = 0; i < present.size(); ++i) {
      const std::string n = present[i]->name;
      EXPECT_EQ(plan.tensors[i].model, present[i]);
      EXPECT_NE(h.params.find("halide_buffer_t *" + n), std::string::npos);
      EXPECT_NE(h.setup.find("buf_" + n + ", dim_" + n + ", a->" + n),
                std::string::npos)
          << n;
      EXPECT_NE(m.call.find("m_" + n + " = {(void *)a->" + n),
                std::string::npos)
          << n;
      // Strided tensors read their strides from the call arguments.
      if (present[i]->tokenStrideField)
        EXPECT_NE(
            h.setup.find(std::string("a->") + present[i]->tokenStrideField),
            std::string::npos)
            << n;
    }
  }
}

} // namespace
} // namespace mhagen
