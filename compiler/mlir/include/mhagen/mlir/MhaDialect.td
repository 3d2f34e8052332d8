//===- MhaDialect.td - the mha dialect ------------------------------------===//
// Attention as one op on tensors, carrying the spec: heads, key/value heads,
// scale and the mask algebra. Lowered by the passes in MhaPasses.td.
#ifndef MHA_DIALECT
#define MHA_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mha_Dialect : Dialect {
  let name = "mha";
  let summary = "Multi-head attention as a single op, lowered by mhagen";
  let cppNamespace = "::mhagen::mha";
  let useDefaultAttributePrinterParser = 1;
}

class Mha_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mha_Dialect, mnemonic, traits>;

// #mha.mask<causal = true, window = 0, padding = false> (sink = N is
// printed only when set)
def Mha_MaskAttr : AttrDef<Mha_Dialect, "Mask"> {
  let mnemonic = "mask";
  let summary = "Which keys each query sees";
  let description = [{
    The conjunction of `causal` (key j visible to query i iff
    j <= i + Tkv - Tq), `window` (W > 0: also j > pos(i) - W; implies
    causal), `padding` (j < kv_lens[b], lengths given as an operand) and
    `sink` (N > 0: also j < N, the first N keys). A union of masks is the
    op's `mask` with its `mask_or` alternatives.
  }];
  let parameters = (ins "bool":$causal, "int64_t":$window, "bool":$padding,
                        DefaultValuedParameter<"int64_t", "0">:$sink);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif
