#include "SpecOptions.h"

#include "mhagen/spec/SpecParser.h"

#include <fstream>
#include <sstream>

namespace mhagen::cli {

void SpecOptions::addTo(CLI::App &app, bool allowFiles) {
  struct Def {
    const char *flag;
    const char *field;
    const char *help;
  };
  static const Def defs[] = {
      {"--d", "d", "model width (default 4096)"},
      {"--h", "h", "query heads (default 32)"},
      {"--kv", "kv", "key/value heads; h % kv == 0 (default: h)"},
      {"--dk", "dk", "query/key head width (default: d / h)"},
      {"--dv", "dv", "value head width (default: dk)"},
      {"--mask", "mask",
       "none | causal | window(W) | padding | sink(N), joined with & and | "
       "and grouped with ( ) (default none)"},
      {"--dtype", "dtype", "f32 | bf16 | f16 (default f32; accumulates f32)"},
      {"--kv-dtype", "kv_dtype",
       "K/V storage: f32 | bf16 | f16 | i8 (default: dtype; i8 takes "
       "per-token scales; op = sdpa)"},
      {"--kv-cache", "kv_cache",
       "contiguous (default) | paged(BLOCK): K/V in blocks of BLOCK tokens "
       "read through a block table, lengths in kv_lens (op = sdpa)"},
      {"--scale", "scale",
       "score scale (default 1/sqrt(dk)), or runtime: a call argument"},
      {"--softcap", "softcap", "cap scores at C: C tanh(s / C) (Gemma 2)"},
      {"--sinks", "sinks",
       "learned: one f32 sink logit per head at call time (gpt-oss)"},
      {"--op", "op", "layer (projections + attention, default) | sdpa"},
      {"--target", "target",
       "host (default) | avx2 | avx512 | avx512_bf16 | cuda[_smXX] | opencl"},
      {"--backend", "backend", "halide (default) | mlir"},
      {"--static-T", "T", "fix the query length in the kernel"},
      {"--static-Tkv", "Tkv", "fix the key/value length in the kernel"},
      {"--static-B", "B", "fix the batch in the kernel"},
  };
  flags_.clear();
  flags_.reserve(sizeof defs / sizeof defs[0]);
  for (const Def &d : defs) {
    flags_.push_back(Flag{d.field, "", nullptr});
    Flag &f = flags_.back();
    f.opt = app.add_option(d.flag, f.value, d.help)->group("Spec");
  }
  biasOpt_ = app.add_flag("--bias", bias_, "projection biases (op = layer)")
                 ->group("Spec");
  lseOpt_ = app.add_flag("--lse", lse_,
                         "also write each row's log-sum-exp, lse [B, T, h]")
                ->group("Spec");
  raggedOpt_ =
      app.add_flag("--ragged", ragged_,
                   "a ragged batch: queries packed with q_offsets, each "
                   "sequence its own key length (kv_lens); `run` draws "
                   "seeded lengths up to --T / --Tkv (op = sdpa)")
          ->group("Spec");
  // --alibi: the standard slopes; --alibi=runtime: slopes at call time.
  alibiOpt_ = app.add_flag("--alibi{true}", alibi_,
                           "ALiBi biases: the standard slopes for h heads, "
                           "or --alibi=runtime (alibi_slopes [h] per call)")
                  ->group("Spec");
  if (allowFiles)
    app.add_option("specs", files_, "spec files (*.mha)")
        ->check(CLI::ExistingFile);
}

bool SpecOptions::anyGiven() const {
  if (!files_.empty() || biasOpt_->count() > 0 || alibiOpt_->count() > 0 ||
      lseOpt_->count() > 0 || raggedOpt_->count() > 0)
    return true;
  for (const Flag &f : flags_)
    if (f.opt->count() > 0)
      return true;
  return false;
}

std::vector<AttentionSpec> SpecOptions::build() const {
  auto applyFlags = [&](RawSpec &raw) {
    for (const Flag &f : flags_) {
      if (f.opt->count() == 0)
        continue;
      RawField rf;
      rf.value = f.value;
      rf.loc = SourceLoc{"<command line>", 0, 0};
      raw.fields[f.field] = rf;
    }
    if (biasOpt_->count() > 0)
      raw.fields["bias"] =
          RawField{bias_ ? "true" : "false", SourceLoc{"<command line>", 0, 0}};
    if (lseOpt_->count() > 0)
      raw.fields["lse"] =
          RawField{lse_ ? "true" : "false", SourceLoc{"<command line>", 0, 0}};
    if (raggedOpt_->count() > 0)
      raw.fields["ragged"] = RawField{ragged_ ? "true" : "false",
                                      SourceLoc{"<command line>", 0, 0}};
    if (alibiOpt_->count() > 0)
      raw.fields["alibi"] = RawField{alibi_, SourceLoc{"<command line>", 0, 0}};
  };

  std::vector<AttentionSpec> specs;
  if (!files_.empty()) {
    std::vector<SpecDiagnostic> diags;
    for (const std::string &file : files_) {
      std::ifstream in(file, std::ios::binary);
      if (!in) {
        diags.push_back(SpecDiagnostic{SourceLoc{file, 0, 0}, "", "",
                                       "cannot read spec file"});
        continue;
      }
      std::stringstream text;
      text << in.rdbuf();
      try {
        std::vector<RawSpec> raws = parseSpecText(text.str(), file);
        if (raws.empty())
          diags.push_back(SpecDiagnostic{
              SourceLoc{file, 0, 0}, "", "",
              "the file holds no spec (write `spec NAME { d = ...; h = ... "
              "}`; see docs/spec-language.md)"});
        for (RawSpec raw : raws) {
          applyFlags(raw); // flags override the file's fields
          try {
            specs.push_back(buildSpec(raw));
          } catch (const SpecError &e) {
            diags.insert(diags.end(), e.diagnostics().begin(),
                         e.diagnostics().end());
          }
        }
      } catch (const SpecError &e) { // syntax error: the file stops there
        diags.insert(diags.end(), e.diagnostics().begin(),
                     e.diagnostics().end());
      }
    }
    if (!diags.empty())
      throw SpecError(diags);
    return specs;
  }

  RawSpec raw;
  raw.loc = SourceLoc{"<command line>", 0, 0};
  // The documented defaults of --d and --h (see addTo); every other field
  // takes the spec language's default (kv = h, dk = d / h, mask none, ...).
  SourceLoc def{"<default>", 0, 0};
  raw.fields["d"] = RawField{"4096", def};
  raw.fields["h"] = RawField{"32", def};
  applyFlags(raw);
  specs.push_back(buildSpec(raw));
  return specs;
}

} // namespace mhagen::cli
