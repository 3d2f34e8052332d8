// A ragged batch (ragged = true; docs/design.md §5, "Ragged batches"): the
// runtime hands the kernel runs of sequences. Consecutive sequences with
// the same query count n form one call of the per-sequence kernel: batch
// = the run's length, t_q = n, their packed rows as a [run, n, ...] view
// (batch stride n rows) at row q_offsets[first], and the run's rows of the
// cache, kv_lens and block table. The kernel places each sequence's
// queries at its own last positions (kv_lens), so t_kv stays the cache's
// capacity. A decode step (every n = 1) is one call; a mixed batch one
// call per run. Every offset comes from the ABI model, so a tensor added
// to the model is split the same way.
#include "RuntimeInternal.h"

#include <cstdint>

namespace mhagen::rt {

namespace {

char *advance(const void *p, int64_t elements, int bytes) {
  return const_cast<char *>(static_cast<const char *>(p)) + elements * bytes;
}

// A tensor's token stride in elements (its dense row when 0 or absent),
// its rows starting at dimension `from`.
int64_t tokenStride(const abi::TensorModel &t, const abi::AbiShape &shape,
                    const mhagen_call_args &a, size_t from) {
  const int64_t ts = t.tokenStride ? t.tokenStride(a) : 0;
  return ts ? ts : abi::denseInnerElements(t, shape, from);
}

} // namespace

int runRagged(const KernelManifest &m, const mhagen_kernel_desc &desc,
              const mhagen_call_args &a, char *err, size_t errlen) {
  const abi::AbiShape shape = abiShapeOf(m);
  const abi::AbiShape kernel = abi::perSequence(shape);
  const int32_t *off = a.q_offsets;
  const abi::CallSizes sizes{a.batch, a.t_q, a.t_kv, a.num_blocks,
                             off[a.batch]};
  for (int64_t first = 0; first < a.batch;) {
    const int64_t n = int64_t(off[first + 1]) - off[first];
    int64_t end = first + 1;
    while (end < a.batch && int64_t(off[end + 1]) - off[end] == n)
      ++end;
    if (n == 0) { // sequences without queries: nothing to compute or write
      first = end;
      continue;
    }
    mhagen_call_args c = a;
    c.batch = end - first;
    c.t_q = n;
    c.q_offsets = nullptr;
    // The run's packed rows as [run, n, ...]: n token strides per batch.
    c.q_batch_stride = a.q_token_stride ? n * a.q_token_stride : 0;
    c.out_batch_stride = a.out_token_stride ? n * a.out_token_stride : 0;
    for (const abi::TensorModel *t : abi::tensors(shape)) {
      const void *p = t->pointer(a);
      if (!p)
        continue;
      const int bytes = abi::scalarBytes(abi::scalarOf(*t, shape));
      if (t->isPacked()) {
        t->bind(c,
                advance(p, off[first] * tokenStride(*t, shape, a, 1), bytes));
      } else if (t->isSequence()) { // a contiguous cache: batch `first`
        const int64_t bs = t->batchStride && t->batchStride(a)
                               ? t->batchStride(a)
                               : tokenStride(*t, shape, a, 2) *
                                     abi::sizeAt(t->tokens(), shape, sizes);
        t->bind(c, advance(p, first * bs, bytes));
      } else if (t->dims[0].factors.size() == 1 &&
                 t->dims[0].factors[0] == abi::Size::Batch) {
        // kv_lens, block_table: row `first`
        t->bind(
            c, advance(p, first * abi::elementsAt(*t, shape, sizes, 1), bytes));
      }
    }
    // The kernel takes only its per-sequence tensors (never q_offsets).
    for (const abi::TensorModel &t : abi::allTensors())
      if (t.elem == abi::Elem::Int32 && !abi::isPresent(t, kernel) &&
          abi::isPresent(t, shape))
        t.bind(c, nullptr);
    if (desc.run(&c, err, errlen) != 0)
      return static_cast<int>(first) + 1;
    first = end;
  }
  return 0;
}

} // namespace mhagen::rt
