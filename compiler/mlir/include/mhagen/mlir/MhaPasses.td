//===- MhaPasses.td - mhagen's MLIR passes --------------------------------===//
#ifndef MHA_PASSES
#define MHA_PASSES

include "mlir/Pass/PassBase.td"

def MhaLowerToLinalg : Pass<"mha-lower-to-linalg", "mlir::ModuleOp"> {
  let summary = "Lower mha.attention to linalg on tensors in the flash form";
  let description = [{
    One scf.forall over (batch, query head, query tile); inside, an scf.for
    over the key tiles the mask does not hide completely (its bounds come
    from the query tile: causal tiles past the diagonal are never visited),
    carrying the running max, running sum and the rescaled accumulator.
    Scores and P V are linalg.matmul ops on tiles; GQA reads the shared
    key/value head by index (no copies); masks are index arithmetic.
  }];
  let options = [
    Option<"queryTile", "query-tile", "int64_t", "32", "query rows per tile">,
    Option<"keyTile", "key-tile", "int64_t", "32", "keys per tile">,
  ];
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def MhaLowerToAmx : Pass<"mha-lower-to-amx", "mlir::ModuleOp"> {
  let summary = "Lower plain bf16 mha.attention to AMX tile products";
  let description = [{
    For an mha.attention with bf16 query, key, value and result, static
    heads and head widths (dv a multiple of 16), a mask of
    `causal` and `window` terms only and no other operand or modifier,
    whose operands are the kernel's memrefs (bufferization.to_tensor) and
    whose result is materialized into the output memref: one scf.forall
    over (batch, query head, tile of 32 queries) computes S^T = K Q^T and
    O += P V with amx.tile_mulf (tdpbf16ps, f32 accumulation) and the
    online softmax in vectors with the queries in the lanes, writing the
    output memref directly. Calls with T_q <= `decode-tokens` keep the op
    (an scf.if on T_q), for the split-KV decode form. Any other op is left
    unchanged.
  }];
  let options = [
    Option<"decodeTokens", "decode-tokens", "int64_t", "0",
           "calls with at most this many queries keep the op">,
  ];
  let dependentDialects = ["mlir::amx::AMXDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def MhaSplitKvDecode : Pass<"mha-split-kv-decode", "mlir::ModuleOp"> {
  let summary = "Give mha.attention a split-KV form for decode calls";
  let description = [{
    For calls with T_q <= `decode-tokens` (chosen at call time by an
    scf.if on T_q), one scf.forall over (batch, K/V head, key chunk) whose
    tasks hold every query head of a GQA group for the call's tokens
    (rows = decode-tokens x h/kv) and run the online softmax over one
    chunk of the key tiles the mask leaves, writing partial (acc, max,
    sum) states; then an scf.forall over (batch, K/V head) merges the
    chunks (FlashDecoding). The chunk count is computed per call: enough
    that B x kv x chunks reaches `split-tasks`, no chunk shorter than
    `split-min-keys` keys, at most `max-splits`. Other calls keep the
    mha.attention (the else branch), for mha-lower-to-linalg.
  }];
  let options = [
    Option<"decodeTokens", "decode-tokens", "int64_t", "0",
           "most query tokens of the split form (0: no split form)">,
    Option<"keyTile", "key-tile", "int64_t", "32", "keys per tile">,
    Option<"splitTasks", "split-tasks", "int64_t", "8",
           "parallel tasks the key chunks aim for (0: one chunk)">,
    Option<"splitMinKeys", "split-min-keys", "int64_t", "256",
           "fewest keys per chunk">,
    Option<"maxSplits", "max-splits", "int64_t", "64", "most chunks">,
  ];
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def MhaTileAndVectorize : Pass<"mha-tile-and-vectorize", "mlir::ModuleOp"> {
  let summary = "Tile the per-tile linalg ops to registers and vectorize";
  let description = [{
    The schedule: matmuls are tiled to register blocks of `rows` x
    (`cols` x `vector-width`) (reduction dimension by 1) and vectorized to
    vector.contract; elementwise and reduction ops are tiled by row and
    vectorized along keys/channels. Tiles that do not divide the shape are
    vectorized with masks. Accumulator transfers are hoisted out of the
    reduction loops.

    Ops with dynamic shapes (the projections of op = layer, M = B*T rows)
    are first tiled to a parallel scf.forall of `gemm-rows` x `gemm-cols`
    blocks, matmuls then to `gemm-depth` slices of the reduction, each
    slice's weights copied to a contiguous panel when it fits a stack
    buffer (read in place, a slice's rows sit one weight row apart and share
    a few L1 sets), then to register blocks as above.
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", "16", "f32 lanes">,
    Option<"rows", "rows", "int64_t", "4", "rows per matmul register block">,
    Option<"cols", "cols", "int64_t", "2", "vectors per register block row">,
    Option<"gemmRows", "gemm-rows", "int64_t", "128",
           "rows per parallel block of a dynamic-shape op">,
    Option<"gemmCols", "gemm-cols", "int64_t", "128",
           "columns per parallel block of a dynamic-shape matmul">,
    Option<"gemmDepth", "gemm-depth", "int64_t", "128",
           "reduction slice of a dynamic-shape matmul">,
    Option<"masked16", "masked-16bit", "bool", "true",
           "the target has masked 16-bit loads/stores (AVX-512BW); "
           "without them padded bf16/f16 tiles are copied by loops">,
  ];
  let dependentDialects = ["mlir::vector::VectorDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::linalg::LinalgDialect"];
}

def MhaHoistStackBuffers : Pass<"mha-hoist-stack-buffers", "mlir::func::FuncOp"> {
  let summary = "Move constant-size stack buffers out of sequential loops";
  let description = [{
    Promoting small buffers to the stack leaves `memref.alloca`s inside the
    scf.for over key tiles. An alloca in a loop body grows the stack on
    every iteration and is only released when the function returns, so a
    long T_kv overflows the stack (SIGSEGV at T_kv = 8192, dk = 128).
    This pass moves every constant-size alloca in front of the outermost
    sequential loop (scf.for, scf.while) that holds it, but never across a
    parallel loop (scf.forall, scf.parallel), an OpenMP region or an
    allocation scope: each thread keeps its own buffers. Hoisting is exact:
    a fresh alloca's contents are undefined, so reusing one buffer for
    every iteration changes nothing. Stack use then no longer depends on
    T_kv.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

def MhaParallelize : Pass<"mha-parallelize", "mlir::ModuleOp"> {
  let summary = "Run the (batch, head, query tile) loop on OpenMP threads";
  let description = [{
    Each scf.forall becomes one OpenMP worksharing loop over all its
    iterations, with the thread count read from the runtime at each call.
    The loop is scheduled dynamically and its last induction variable (the
    query tile) is mirrored, so the threads take the costliest causal
    tiles first and finish together.
  }];
  let dependentDialects = ["mlir::omp::OpenMPDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::func::FuncDialect"];
}

def MhaLowerVectors : Pass<"mha-lower-vectors", "mlir::ModuleOp"> {
  let summary = "Lower contractions to FMAs (outer products) and transfers";
  let description = [{
    The input is the bufferized, parallelized module: vector.contract
    register blocks become outer-product FMAs, multi-reductions inner
    reductions, masked transfers transfers with a mask operand, and strided
    memref.copy ops plain loops (through linalg.copy; no memrefCopy call
    into MLIR's runner library).
  }];
  let dependentDialects = ["mlir::vector::VectorDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::linalg::LinalgDialect",
                           "mlir::memref::MemRefDialect"];
}

def MhaPolynomialExp : Pass<"mha-polynomial-exp", "mlir::ModuleOp"> {
  let summary = "Replace math.exp (and friends) by polynomial approximations";
  let description = [{
    MLIR 19 offers the polynomial approximations only as a test pass; this
    pass applies the same upstream patterns so exp vectorizes without libm.
  }];
  let dependentDialects = ["mlir::math::MathDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect"];
}

#endif
